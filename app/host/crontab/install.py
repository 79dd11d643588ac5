"""Reading and installing the crontab by subprocess, each install read back and retried, and
the block file (QL_CRONTAB_FILE) written once the install succeeded.

Installing reads the crontab (QL_CRONTAB_LIST), replaces our block, installs the whole text
(QL_CRONTAB_INSTALL) and reads it back; with no active line the block is taken out.
QL_CRONTAB_FILE holds the block's content as last installed.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess

from qlshadow.files import write_private
from qlshadow.host.crontab.block import compose, our_marks
from qlshadow.host.crontab.errors import CrontabError
from qlshadow.host.crontab.state import note_installed

INSTALL_TIMEOUT = 30


def _run(template: str, path: str | None, key: str) -> subprocess.CompletedProcess:
    """Run a command template without a shell ({file} → path), its output captured."""
    try:
        argv = shlex.split(template)
    except ValueError as exc:
        raise CrontabError(f"{key}={template!r} cannot be split into words ({exc})") from None
    if path is not None:
        argv = [word.replace("{file}", path) for word in argv]
    what = "reading" if key == "QL_CRONTAB_LIST" else "installing"
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=INSTALL_TIMEOUT)
    except FileNotFoundError:
        raise CrontabError(f"{what} the crontab failed: {argv[0]} not found ({key})") from None
    except subprocess.TimeoutExpired:
        raise CrontabError(f"{what} the crontab failed: {argv[0]} ran longer than "
                           f"{INSTALL_TIMEOUT} s ({key})") from None
    except OSError as exc:
        raise CrontabError(f"{what} the crontab failed: {argv[0]}: {exc.strerror or exc} "
                           f"({key})") from None


def _first_line(result: subprocess.CompletedProcess) -> str:
    said = (result.stderr or result.stdout).decode("utf-8", "replace").strip().splitlines()
    return f": {said[0]}" if said else ""


# "No crontab yet" as Debian's and cronie's crontab say it, and as BusyBox's does (it opens
# the user's file in the spool directory and reports the missing file).
_NO_CRONTAB = (re.compile(rb"no crontab for "),
               re.compile(rb"can't open '[^'/]+': No such file or directory"))


def read_crontab(settings) -> bytes:
    """The crontab QL_CRONTAB_LIST prints (empty: none yet, or no list command)."""
    if not settings.crontab_list.strip():
        return b""
    result = _run(settings.crontab_list, None, "QL_CRONTAB_LIST")
    if result.returncode == 0:
        return result.stdout
    if not result.stdout and any(p.search(result.stderr) for p in _NO_CRONTAB):
        return b""
    command = shlex.join(shlex.split(settings.crontab_list))
    raise CrontabError(f"reading the crontab failed: {command} exited {result.returncode}"
                       f"{_first_line(result)}; nothing was installed")


# Debian's crontab(1) copies its file argument into a 100-byte buffer: a longer name is cut
# and the install fails with "No such file or directory" on a name that does not exist.
DEBIAN_NAME_MAX = 99


def install_bytes(settings, text: bytes) -> None:
    """Install text with QL_CRONTAB_INSTALL from a private temp file beside the block file."""
    import tempfile
    directory = os.path.dirname(os.path.abspath(settings.crontab_file))
    try:
        fd, path = tempfile.mkstemp(dir=directory, prefix=".crontab-install.")  # 0600
        with os.fdopen(fd, "wb") as fh:
            fh.write(text)
    except OSError as exc:
        raise CrontabError(f"cannot write the crontab to install in {directory}: "
                           f"{exc.strerror or exc}") from None
    try:
        result = _run(settings.crontab_install, path, "QL_CRONTAB_INSTALL")
        if result.returncode != 0:
            argv = [word.replace("{file}", path) for word in shlex.split(settings.crontab_install)]
            hint = ""
            if len(os.fsencode(path)) > DEBIAN_NAME_MAX:
                hint = (f" (Debian's crontab reads at most {DEBIAN_NAME_MAX} bytes of a file name and this "
                        "one is longer: install through stdin, QL_CRONTAB_INSTALL=\"sh -c 'crontab - < "
                        "\\\"$0\\\"' {file}\" with QL_CRONTAB_LIST=\"crontab -l\", "
                        "or use a shorter data dir)")
            raise CrontabError(f"installing the crontab failed: {shlex.join(argv)} exited "
                               f"{result.returncode}{_first_line(result)}{hint}")
    finally:
        os.unlink(path)


# Another program's crontab run at the same moment as ours can undo our install or double
# the crontab: BusyBox's crontab writes through one fixed temp name, `<user>.new`, opened
# with O_TRUNC|O_APPEND and then renamed, so two runs that overlap can both append to one
# file, and the later rename fails with "can't move 'root.new' to 'root'". So every install
# is read back (QL_CRONTAB_LIST): when our block is not as composed, the text read is
# composed again and installed again, at most INSTALL_ATTEMPTS times. A doubled crontab
# (our text and the other program's, one after the other) gets our block in the other
# program's text.
INSTALL_ATTEMPTS = 5


def _other_text(settings, seen: bytes, wanted: bytes, before: bytes) -> bytes:
    """The other program's text when seen is wanted and that text one after the other,
    else seen. The other text is a whole crontab when it holds our block too or begins
    with the crontab we read before installing; lines merely added after ours are not."""
    if seen != wanted and wanted:
        for other in (seen[len(wanted):] if seen.startswith(wanted) else b"",
                      seen[:-len(wanted)] if seen.endswith(wanted) else b""):
            if other and ((before and other.startswith(before))
                          or our_marks(settings, other.splitlines(True))):
                return other
    return seen


def install_block(settings, content: str | None, drop: tuple = ()) -> bool:
    """Put our block with this content (None: no block) into the crontab; True when the
    crontab had to be installed. Read back after each install (see INSTALL_ATTEMPTS)."""
    actual = base = read_crontab(settings)
    verify = bool(settings.crontab_list.strip())
    for attempt in range(INSTALL_ATTEMPTS):
        wanted = compose(settings, base, content, drop)
        if wanted == actual:
            return attempt > 0
        try:
            install_bytes(settings, wanted)
        except CrontabError as exc:
            failure: CrontabError | None = exc
        else:
            failure = None
        if not verify:
            if failure is not None:
                raise failure
            return True
        try:
            seen = read_crontab(settings)
        except CrontabError:
            if failure is not None:
                raise failure from None
            return True  # installed, not verifiable now: the next change reads it again
        if failure is not None and seen == actual:
            raise failure  # the crontab is as it was: our install failed by itself
        if seen == wanted:
            drop = ()  # taken out: the same text once more would be another line
        base = _other_text(settings, seen, wanted, actual)
        actual = seen
    raise CrontabError(f"another program changed the crontab during each of {INSTALL_ATTEMPTS} "
                       "installs; try again")


def write(settings, text: str) -> str:
    """Replace the block file (QL_CRONTAB_FILE) atomically, 0600: its lines carry the
    user's commands, which often hold secrets."""
    path = os.path.abspath(settings.crontab_file)
    try:
        write_private(path, text)
    except OSError as exc:
        raise CrontabError(f"cannot write the crontab {path}: {exc.strerror or exc}") from None
    return path


def put(settings, content: str, active: int, drop: tuple = ()) -> str:
    """Install our block (none when no line is active), then write the block file.

    The file is written only after the install succeeded, so that it always holds what
    is installed. Returns one line saying what was done where.
    """
    path = os.path.abspath(settings.crontab_file)
    if settings.scheduler != "system":
        note_installed(settings, None)
        write(settings, content)
        return f"node scheduler: wrote {path}, installed nothing"
    if not settings.crontab_install.strip():
        note_installed(settings, None)
        write(settings, content)
        return f"wrote {path}; installed nothing (QL_CRONTAB_INSTALL is empty)"
    installed = install_block(settings, content if active else None, drop)
    write(settings, content)
    note_installed(settings, content)
    if active:  # on OpenWrt crond may not run at all (app/host/crond.py)
        from qlshadow.host.crond import ensure_running
        ensure_running()
    lines = f"{active} active line{'' if active == 1 else 's'}"
    where = f"with `{settings.crontab_install}` (block file {path})"
    if not installed:
        return f"crontab already up to date ({lines}) {where}"
    if active:
        return f"installed qlshadow's block ({lines}) {where}"
    return f"removed qlshadow's block (no active line) {where}"
