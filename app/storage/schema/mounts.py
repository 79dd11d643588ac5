"""The data directory and the SQLite file are never created under a configured mount point
that is not mounted yet (check_mounted, asked by every command before it touches either)."""
from __future__ import annotations

import os
import re

from qlshadow.errors import Unavailable


class NotMounted(Unavailable):
    """The data dir or database would be created under a mount point not mounted yet."""
    exit_status = 75  # EX_TEMPFAIL: the service starts again when the mount appears


# Mount points the host is configured to mount: OpenWrt's block-mount, then any fstab.
FSTABS = ("/etc/config/fstab", "/etc/fstab")


def _unescape(path: str) -> str:
    """An fstab path with its octal escapes (\\040 for a space) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def mount_targets(fstab: str) -> list:
    """The mount points a fstab (or OpenWrt's UCI /etc/config/fstab) lists, "/" left out."""
    try:
        with open(fstab, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return []
    targets = []
    if "config " in text:  # UCI: `config mount` sections with `option target`
        for section in re.split(r"^\s*config\s", text, flags=re.M)[1:]:
            options = dict(re.findall(r"^\s*option\s+(\w+)\s+['\"]?([^'\"\n]*)['\"]?",
                                      section, flags=re.M))
            if section.split()[0] == "mount" and options.get("enabled", "1") != "0":
                targets.append(options.get("target", ""))
    else:
        for line in text.splitlines():
            fields = line.split()
            if len(fields) >= 3 and not fields[0].startswith("#") and fields[2] != "swap":
                targets.append(_unescape(fields[1]))
    return [os.path.normpath(t) for t in targets if t.startswith("/") and os.path.normpath(t) != "/"]


def check_mounted(settings) -> None:
    """Refuse to create the data directory or the SQLite database under a configured mount
    point not mounted yet (every command asks first, before it touches either).

    Started before its disk (a USB stick) is mounted, the service would create the data
    directory, its files and an empty database on the filesystem beneath the mount point
    and keep writing there, hidden once the disk is mounted. What exists already is never
    refused: it was made on purpose.
    """
    from qlshadow.config import sqlite_file
    for what, path in (("the data directory", settings.data_dir),
                       ("the database", sqlite_file(settings.db_url))):
        if path is None or os.path.exists(path):
            continue
        where = os.path.realpath(os.path.abspath(path))
        for fstab in FSTABS:
            for target in mount_targets(fstab):
                if (where == target or where.startswith(target + os.sep)) \
                        and not os.path.ismount(target):
                    raise NotMounted(f"{target} is a mount point in {fstab} that is not "
                                     f"mounted: not creating {what} {path} beneath it; start "
                                     "again once it is mounted")
