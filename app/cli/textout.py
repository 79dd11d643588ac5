"""Text for people at a terminal: one table formatter, times and durations (the CLI's).

Tables fit the terminal by shortening the columns marked `shrink` (names, commands) with a
trailing "~"; ids, times and numbers are never cut. Into a pipe or a file nothing is cut,
so grep and awk see whole values.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from qlshadow.timefmt import local_text, utc_text

NONE = "-"  # a cell with no value
# Control characters (C0, DEL, C1) shown as escapes: a cron's name or command is anyone's
# text, and an ESC would colour the terminal, a line break split a row in two.
_SHOWN = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7f, 0xa0))}
_SHOWN.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})


def shown(text: str) -> str:
    """text with its control characters escaped (\\x1b, \\n), safe for one terminal cell."""
    return text.translate(_SHOWN)


@dataclass(frozen=True)
class Column:
    """A table column: its title, where its values sit, and whether it may be shortened."""
    title: str
    right: bool = False
    shrink: bool = False


def display_width(text: str) -> int:
    """Terminal cells text takes: East Asian wide characters take two (cron names often are)."""
    if text.isascii():
        return len(text)
    from unicodedata import east_asian_width  # only for non-ASCII text
    return sum(2 if east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def _cut(text: str, width: int) -> str:
    if display_width(text) <= width:
        return text
    out, used = [], 0
    for ch in text:
        cells = display_width(ch)
        if used + cells > width - 1:
            break
        out.append(ch)
        used += cells
    return "".join(out).rstrip() + "~"


def _pad(text: str, width: int, right: bool) -> str:
    gap = " " * (width - display_width(text))
    return gap + text if right else text + gap


def terminal_width(stream=None) -> int | None:
    """Columns of the terminal stream writes to, or None when it is not a terminal."""
    stream = stream or sys.stdout
    try:
        if not stream.isatty():
            return None
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return None


def table(columns: list, rows: list, width: int | None = None) -> str:
    """rows (lists of cell text) under columns' titles, two spaces apart, fitted to width."""
    cells = [[c.title for c in columns]] + [[NONE if v is None or v == "" else shown(str(v))
                                             for v in row] for row in rows]
    widths = [max(display_width(row[i]) for row in cells) for i in range(len(columns))]
    if width is not None:
        over = sum(widths) + 2 * (len(columns) - 1) - width
        # Take the excess from the widest shrinkable column first, never below its title
        # or 8 cells, so a narrow terminal still shows the start of every name.
        while over > 0:
            candidates = [i for i, c in enumerate(columns)
                          if c.shrink and widths[i] > max(8, display_width(c.title))]
            if not candidates:
                break
            widest = max(candidates, key=lambda i: widths[i])
            widths[widest] -= 1
            over -= 1
    lines = []
    for row in cells:
        parts = [_pad(_cut(v, widths[i]) if columns[i].shrink else v, widths[i], columns[i].right)
                 for i, v in enumerate(row)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines) + "\n"


def record(pairs: list) -> str:
    """(label, value) pairs as aligned 'label: value' lines (one thing shown in full)."""
    wide = max(len(label) for label, _ in pairs)
    return "".join(f"{label + ':':<{wide + 1}} {NONE if v is None or v == '' else shown(str(v))}\n"
                   for label, v in pairs)


def when(seconds: int | None, utc: bool = False) -> str:
    """Epoch seconds as '2026-11-30 04:00:03 CST': the box's local time, or UTC, zone named."""
    if seconds is None:
        return NONE
    return utc_text(seconds) if utc else local_text(seconds)  # any time_t, 32-bit included


def took(seconds: int | None) -> str:
    """How long an execution ran: as duration, and `<1s` for a run under a second (times
    are kept in whole seconds, so 0 is a run that started and ended in the same second)."""
    if seconds is not None and seconds <= 0:
        return "<1s"
    return duration(seconds)


def size(count: int | None) -> str:
    """Bytes for a person: B, KiB, MiB or GiB with one decimal (as the page shows them)."""
    if count is None:
        return NONE
    if count < 1024:
        return f"{count} B"
    for unit in ("KiB", "MiB", "GiB"):
        count /= 1024
        if count < 1024 or unit == "GiB":
            break
    return f"{count:.1f} {unit}"


def duration(seconds: int | None) -> str:
    """A duration as 0s, 42s, 3m05s, 2h03m or 3d04h."""
    if seconds is None:
        return NONE
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"

