"""The locks around crontab work: one per data dir, and one per crontab that every data dir
installing into it shares (lock_path)."""
from __future__ import annotations

import os
import shlex

from qlshadow.host.crontab.errors import CrontabError

# The directory of the crontab locks: one every user and data dir on the box sees, in RAM
# on OpenWrt (/var/lock is /tmp/lock) and on Debian (/run/lock, which systemd's PrivateTmp
# leaves shared); /tmp on a box without it.
LOCK_DIRS = ("/var/lock", "/tmp")


def crontab_key(settings) -> str:
    """Which crontab the settings install into, alike for every data dir on the box: the
    uid and the words of QL_CRONTAB_LIST (else QL_CRONTAB_INSTALL), with the crontab
    program's path, and a `busybox` before it, reduced to `crontab`."""
    template = settings.crontab_list.strip() or settings.crontab_install.strip()
    try:
        words = shlex.split(template)
    except ValueError:
        words = [template]
    key: list = []
    for word in words:
        if os.path.basename(word) == "crontab":
            if key and os.path.basename(key[-1]) == "busybox":
                key.pop()
            word = "crontab"
        key.append(word)
    return f"{os.geteuid()} {shlex.join(key)}"


def lock_path(settings) -> str:
    """The file whose flock serialises every install into this settings' crontab."""
    import hashlib
    directory = next((d for d in LOCK_DIRS if os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK)),
                     LOCK_DIRS[-1])
    digest = hashlib.sha256(crontab_key(settings).encode()).hexdigest()[:16]
    return os.path.join(directory, f"qlshadow-crontab-{digest}.lock")


class Lock:
    """Serialises crontab work across threads, processes and data dirs: first the data
    dir's (flock on the block file's directory, which holds its files), then, when
    something is installed, the crontab's (flock on lock_path, shared by every data dir
    that installs into it). So the crontab installed last was composed from the one
    installed before it, whichever data dir installed that."""

    def __init__(self, settings):
        self.directory = os.path.dirname(os.path.abspath(settings.crontab_file))
        self.crontab = lock_path(settings) if settings.crontab_install.strip() else None
        self.fds: list = []

    def _take(self, path: str, flags: int) -> None:
        import fcntl
        fd = os.open(path, flags | os.O_CLOEXEC, 0o600)
        self.fds.append(fd)
        if not flags & os.O_DIRECTORY and os.fstat(fd).st_uid != os.geteuid():
            # Another user's file would let that user hold our installs up at will.
            raise CrontabError(f"the crontab lock {path} belongs to another user; remove it")
        fcntl.flock(fd, fcntl.LOCK_EX)

    def __enter__(self):
        what = self.directory
        try:
            os.makedirs(self.directory, exist_ok=True)
            self._take(self.directory, os.O_RDONLY | os.O_DIRECTORY)
            if self.crontab:
                what = self.crontab
                self._take(self.crontab, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW)
        except OSError as exc:
            self.__exit__()
            raise CrontabError(f"cannot lock {what}: {exc.strerror or exc}") from None
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info):
        while self.fds:
            os.close(self.fds.pop())  # closing releases the lock
        return False
