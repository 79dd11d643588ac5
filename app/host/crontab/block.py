"""Our block inside the user's crontab: its markers, and the crontab text with the block
replaced or taken out.

The crontab is the user's: our lines sit in one block between `# BEGIN qlshadow <data dir>`
and `# END qlshadow <data dir>` (its real path), and every other line is kept byte for byte.
"""
from __future__ import annotations

import os
import re

from qlshadow.host.crontab.content import HEADER_SYSTEM
from qlshadow.host.crontab.data_dir import real_data_dir
from qlshadow.host.crontab.errors import CrontabError
from qlshadow.host.crontab.line import encode, shell_word

_MARK = re.compile(rb"# (BEGIN|END) qlshadow (/.*)")
_OCTAL = re.compile(rb"\\0([0-7]{3})")


def markers(settings) -> tuple:
    """The begin and end lines of our block; they name the data dir's real path, so two
    installations on one box keep their own blocks and two spellings of one dir share one."""
    data = encode(real_data_dir(settings))
    return f"# BEGIN qlshadow {data}", f"# END qlshadow {data}"


def our_marks(settings, lines: list) -> list:
    """(index, is begin) of the marker lines that name our data dir in any spelling: a block
    an earlier release marked with a symlink's name is ours as well."""
    mine = real_data_dir(settings)
    exact = encode(mine).encode()
    ours: dict = {}
    found = []
    for i, text in enumerate(lines):
        match = _MARK.fullmatch(text.rstrip())
        if not match:
            continue
        name = match.group(2)
        if name not in ours:
            path = os.fsdecode(_OCTAL.sub(lambda m: bytes([int(m.group(1), 8)]), name))
            ours[name] = name == exact or ("\0" not in path and os.path.realpath(path) == mine)
        if ours[name]:
            found.append((i, match.group(1) == b"BEGIN"))
    return found


def old_whole_crontab_lines(settings, lines: list) -> set:
    """Indexes of the lines an earlier qlshadow wrote when it owned the whole crontab.

    It wrote HEADER_SYSTEM first and no markers; its lines name our data dir (as given or
    its real path). Only these are taken over, so that upgrading never installs every cron
    twice.
    """
    if not lines or lines[0].rstrip() != HEADER_SYSTEM.encode():
        return set()
    spellings = {os.path.abspath(settings.data_dir), real_data_dir(settings)}
    names = {f"QL_DATA_DIR={shell_word(data, escaped)} ".encode()
             for data in spellings for escaped in (False, True)}
    return {0} | {i for i, text in enumerate(lines)
                  if b" ID=" in text and any(name in text for name in names)}


def _dropped(lines: list, taken: set, drop: tuple) -> set:
    """Indexes of the lines to drop: (line number, text) pairs, each the line at its number
    when it still has that text (line ends aside), else the first such line outside taken."""
    gone: set = set()
    for number, wanted in drop:
        order = [number - 1] + list(range(len(lines)))
        gone.update(next(([i] for i in order if 0 <= i < len(lines) and i not in taken | gone
                          and lines[i].rstrip(b"\r\n") == wanted), []))
    return gone


def compose(settings, current: bytes, content: str | None, drop: tuple = ()) -> bytes:
    """current with our block replaced by content (None: removed); all else byte for byte,
    but for the user's lines in drop, (line number, text) pairs (`qlshadow adopt`).

    Our block is found by markers naming our data dir in any spelling. A new block goes at
    the end; several blocks that each pair up (one per spelling, or a doubled crontab)
    become one, where the first stood. Markers that do not pair up (one missing, out of
    order) are refused: only the user can tell which lines are ours then.
    """
    begin, end = markers(settings)
    lines = current.splitlines(keepends=True)
    marks = our_marks(settings, lines)
    kinds = [is_begin for _, is_begin in marks]
    if not marks:
        old = old_whole_crontab_lines(settings, lines)
        old |= _dropped(lines, old, drop)
        before = b"".join(text for i, text in enumerate(lines) if i not in old)
        after = b""
    elif len(kinds) % 2 == 0 and kinds == [True, False] * (len(kinds) // 2):
        inside = set()
        for (first, _), (last, _) in zip(marks[0::2], marks[1::2], strict=True):
            inside.update(range(first, last + 1))
        start = marks[0][0]
        inside |= _dropped(lines, inside, drop)
        before = b"".join(text for i, text in enumerate(lines[:start]) if i not in inside)
        after = b"".join(text for i, text in enumerate(lines) if i > start and i not in inside)
    else:
        raise CrontabError(f"the crontab holds the line {begin!r} {kinds.count(True)} and "
                           f"{end!r} {kinds.count(False)} times (counting other spellings of "
                           "the data dir), not in pairs in that order; fix it with crontab -e, "
                           "nothing was installed")
    if content is None:
        return before + after
    if before and not before.endswith(b"\n"):
        before += b"\n"
    return before + f"{begin}\n{content}{end}\n".encode() + after
