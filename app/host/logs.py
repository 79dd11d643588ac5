"""Reading a task log safely: only files inside the log directory, by the path a row stores.

A Run or an instance stores the log path its own callbacks sent (task.sh sends
`<folder>/<stamp>-<pid>.log`, relative to the log directory). That path is client data,
so it is resolved against the log directory and refused when it could leave it: `..`
anywhere, an absolute path elsewhere, a symlink on the way (each component is opened with
O_NOFOLLOW below the log directory, so no link is followed, and the real path is checked
too), or anything but a regular file. No Flask: the HTTP views and the CLI both use it.
"""
from __future__ import annotations

import os
import stat

DEFAULT_BYTES = 64 * 1024
MAX_BYTES = 1024 * 1024
# Reading backwards for `tail -n`: a block at a time, and never more than this in memory.
_BLOCK = 8192
_MAX_TAIL = 4 * 1024 * 1024


class LogUnavailable(Exception):
    """The log cannot be read; str() is one sentence for the user (the views answer NotFound)."""


def _parts(log_dir: str, stored: str) -> list:
    """The components of stored below log_dir, or LogUnavailable when it would leave it."""
    if not stored or "\x00" in stored:
        raise LogUnavailable("its stored log path is not a file name.")
    if os.path.isabs(stored):
        root = os.path.realpath(log_dir)
        # An absolute path is accepted only as a spelling of a file inside the log directory.
        for base in {os.path.abspath(log_dir), root}:
            if stored.startswith(base.rstrip("/") + "/"):
                stored = stored[len(base.rstrip("/")) + 1:]
                break
        else:
            raise LogUnavailable("its stored log path is outside the log directory.")
    parts = [p for p in stored.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise LogUnavailable("its stored log path leaves the log directory.")
    return parts


def open_log(log_dir: str, stored: str):
    """An open binary file of the log stored names, inside log_dir; LogUnavailable if not."""
    parts = _parts(log_dir, stored)
    root = os.path.realpath(log_dir)
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | os.O_NOFOLLOW
    try:
        fd = os.open(root, flags | os.O_DIRECTORY)
    except FileNotFoundError:
        raise LogUnavailable("its log is gone (pruned or deleted): there is no log "
                             "directory.") from None
    try:
        for part in parts[:-1]:
            parent, fd = fd, os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(parent)
        # O_NONBLOCK: a FIFO planted under the name must not hang the reader.
        parent, fd = fd, os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fd)
        os.close(parent)
    except FileNotFoundError:
        os.close(fd)
        raise LogUnavailable(f"its log {parts[-1]} is gone (pruned or deleted).") from None
    except OSError:
        # ELOOP (a symlink under O_NOFOLLOW), ENOTDIR, EACCES: nothing we may read.
        os.close(fd)
        raise LogUnavailable("its stored log path is not a readable file in the log "
                             "directory.") from None
    real = os.path.realpath(os.path.join(root, *parts))
    if not stat.S_ISREG(os.fstat(fd).st_mode) or not real.startswith(root.rstrip("/") + "/"):
        os.close(fd)
        raise LogUnavailable("its stored log path is not a regular file in the log directory.")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _from_char_start(data: bytes) -> bytes:
    """data without a cut UTF-8 sequence at its start (at most 3 continuation bytes)."""
    skip = 0
    while skip < min(3, len(data)) and 0x80 <= data[skip] <= 0xBF:
        skip += 1
    return data[skip:]


def tail_bytes(fh, limit: int) -> dict:
    """The last `limit` bytes of an open log: {"text", "truncated", "size"}."""
    size = os.fstat(fh.fileno()).st_size
    start = max(0, size - limit)
    fh.seek(start)
    data = fh.read(limit)
    if start:
        data = _from_char_start(data)
    return {"text": data.decode("utf-8", "replace"), "truncated": start > 0, "size": size}


def tail_lines(fh, count: int) -> tuple:
    """(bytes of the last `count` lines, end offset read to) of an open log."""
    end = os.fstat(fh.fileno()).st_size
    position, data = end, b""
    # One more newline than lines wanted, unless the file ends without one.
    while position > 0 and len(data) < _MAX_TAIL:
        step = min(_BLOCK, position)
        position -= step
        fh.seek(position)
        data = fh.read(step) + data
        if data.count(b"\n") > count:
            break
    lines = data.splitlines(keepends=True)
    if position > 0 or len(data) >= _MAX_TAIL:
        lines = lines[1:]  # the first line may be cut
    return b"".join(lines[-count:] if count else []), end
