"""Private files in the data dir: written whole, readable by the service's user only."""
from __future__ import annotations

import os
import stat
import tempfile


def write_private(path: str, text: str, replace: bool = True) -> bool:
    """Write text to path as a finished 0600 file: never half-written, even on power loss.

    The text goes to a temp file beside path (fsynced), which then takes path's place:
    with replace, atomically over any old file; without, only if path does not exist yet
    (a hard link, so two processes racing agree on one file). Returns whether path is
    now this text.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False  # another process made it first: theirs stands
    finally:
        if os.path.exists(tmp):  # gone once it replaced path; a link leaves it behind
            os.unlink(tmp)


def make_private(path: str) -> int | None:
    """Make an existing file of ours 0600 when others may read it; returns its looser mode
    then, else None (already private, missing, or not ours to change)."""
    try:
        found = os.stat(path)
        if found.st_mode & 0o077 == 0 or found.st_uid != os.geteuid():
            return None
        os.chmod(path, 0o600)
    except OSError:
        return None
    return stat.S_IMODE(found.st_mode)
