"""A consistent copy of the SQLite database for backups and firmware upgrades.

Copying the live file (and its WAL) while the server writes gives a torn database. The
snapshot is taken with SQLite's online backup API instead: one self-contained file (no
WAL beside it) that holds every transaction committed before it began. By default it sits
beside the database as `<database>.snapshot`, where OpenWrt's sysupgrade keeps it
(conf/openwrt/sysupgrade.sh). Opening the database (serve, and every command that may
create it) first restores a missing database from that file, and removes a snapshot more
than STALE_AFTER seconds old beside a live database: the database is newer.

PostgreSQL keeps its data elsewhere: there is nothing to snapshot.
"""
from __future__ import annotations

import os
import time

from qlshadow.config import SNAPSHOT_SUFFIX, sqlite_file

SUFFIX = SNAPSHOT_SUFFIX
# Seconds after which a snapshot beside a live database is outdated and removed.
STALE_AFTER = 600
# SQLite's own files beside a database; a copy of any of them is either torn or useless.
LIVE_SUFFIXES = ("", "-wal", "-shm", "-journal")


def snapshot_path(db_file: str) -> str:
    """Where the snapshot of the database db_file is kept by default."""
    return db_file + SUFFIX


def snapshot(settings, path: str | None = None) -> str | None:
    """Copy the SQLite database to path (default: beside it) as one consistent file,
    written whole or not at all (0600); returns the path, or None on PostgreSQL."""
    import sqlite3

    db_file = sqlite_file(settings.db_url)
    if db_file is None:
        return None
    if not os.path.isfile(db_file):
        raise FileNotFoundError(f"there is no database at {db_file} to snapshot")
    path = path or snapshot_path(db_file)
    tmp = f"{path}.tmp"
    for stale in (tmp, tmp + "-journal"):
        if os.path.exists(stale):
            os.unlink(stale)
    source = sqlite3.connect(db_file, timeout=settings.db_timeout)
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        target = sqlite3.connect(tmp)
        try:
            source.backup(target)
            # The copy carries the source's WAL flag; rollback mode makes it one file that
            # needs nothing beside it (serve switches a restored database back to WAL).
            target.execute("PRAGMA journal_mode=DELETE").fetchone()
        finally:
            target.close()
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    finally:
        source.close()
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _sync_dir(os.path.dirname(os.path.abspath(path)))
    return path


def restore(settings) -> str | None:
    """Before the database is opened: bring back a missing database from its snapshot, or
    drop a snapshot that a live database has outdated. Returns one line saying what was
    done, or None."""
    db_file = sqlite_file(settings.db_url)
    if db_file is None:
        return None
    saved = snapshot_path(db_file)
    if not os.path.isfile(saved):
        return None
    if os.path.exists(db_file):
        # A backup may still be reading a fresh one (sysupgrade tars it after its hook).
        if time.time() - os.path.getmtime(saved) < STALE_AFTER:
            return None
        os.unlink(saved)
        return f"removed the database snapshot {saved}: the database beside it is newer"
    # A WAL or shared-memory file without its database belongs to another database:
    # SQLite would replay it into the restored one.
    for suffix in LIVE_SUFFIXES[1:]:
        if os.path.exists(db_file + suffix):
            os.unlink(db_file + suffix)
    os.replace(saved, db_file)
    _sync_dir(os.path.dirname(os.path.abspath(db_file)))
    return f"restored the database {db_file} from its snapshot (taken for a backup or upgrade)"


def keep_list(settings, listed: list, leave_out: tuple = ()) -> list:
    """The files a configuration backup should hold, from the paths already listed:
    the conf file and the data dir's files, with the snapshot instead of the live
    database, its WAL and shared memory, and without the paths in leave_out."""
    data_dir = os.path.abspath(settings.data_dir)
    drop = {os.path.abspath(path) for path in leave_out}
    db_file = sqlite_file(settings.db_url)
    if db_file is not None:
        db_file = os.path.abspath(db_file)
        drop.update(db_file + suffix for suffix in LIVE_SUFFIXES)
    keep = {path for path in listed if path and os.path.abspath(path) not in drop}
    if settings.config_file and os.path.isfile(settings.config_file):
        keep.add(os.path.abspath(settings.config_file))
    for root, dirs, files in os.walk(data_dir):
        dirs.sort()
        for name in files:
            path = os.path.join(root, name)
            if path not in drop and not name.endswith(f"{SUFFIX}.tmp"):
                keep.add(path)
    if db_file is not None and os.path.isfile(snapshot_path(db_file)):
        keep.add(snapshot_path(db_file))
    return sorted(keep)


def _sync_dir(directory: str) -> None:
    """fsync a directory, so a rename in it survives a power cut."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
