"""Storage use: the prune reserve file in the data dir, and the bytes the storage budget
counts (database pages in use, the WAL up to its checkpoint point, task logs)."""
from __future__ import annotations

import os

from qlshadow.storage.db.engine import WAL_CHECKPOINT_BYTES
from qlshadow.storage.models import database
from qlshadow.storage.retention.policy import Policy

# A file of RESERVE_BYTES in the data dir that `qlshadow prune` deletes first when the
# partition is (nearly) full: SQLite needs room in the WAL to delete rows, so a prune on a
# full disk would otherwise fail like every other write. Random bytes, because UBIFS and
# JFFS2 (OpenWrt's overlay) compress: zeros would hold back almost nothing. It covers the
# WAL prune keeps (PRUNE_WAL_PAGES) plus its largest transaction, with room to spare.
RESERVE_NAME = "prune.reserve"
RESERVE_BYTES = 512 * 1024
PRUNE_WAL_PAGES = 16


def reserve_path(data_dir: str) -> str:
    """Where the data dir's prune reserve lives."""
    return os.path.join(data_dir, RESERVE_NAME)


def make_reserve(data_dir: str) -> str:
    """Make the reserve file unless it is there; returns "in place" or why it is not.

    Written whole or not at all (a partial file on a full disk is removed again), written
    only when missing (a router's flash pays for every write), and only while at least
    twice its size is free: the reserve must never be what fills the partition.
    """
    path = reserve_path(data_dir)
    try:
        if os.path.getsize(path) >= RESERVE_BYTES:
            return "in place"
    except OSError:
        pass
    try:
        os.makedirs(data_dir, mode=0o700, exist_ok=True)
        stat = os.statvfs(data_dir)
        if stat.f_bavail * stat.f_frsize < RESERVE_BYTES * 2:
            return f"not made: less than {RESERVE_BYTES * 2 // 1024} KiB free"
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as fh:
            for _ in range(RESERVE_BYTES // 65536):
                fh.write(os.urandom(65536))
            fh.flush()
            os.fsync(fh.fileno())
        return "in place"
    except OSError as exc:
        try:
            os.unlink(path)
        except OSError:
            pass
        return f"not made: {exc.strerror or exc}"


def release_reserve(data_dir: str) -> bool:
    """Delete the reserve when the data dir's partition has less free than it holds."""
    path = reserve_path(data_dir)
    try:
        stat = os.statvfs(data_dir)
        if stat.f_bavail * stat.f_frsize >= RESERVE_BYTES * 2:
            return False
        os.unlink(path)
        return True
    except OSError:
        return False


def log_bytes(log_dir: str) -> int:
    """Bytes of the files in the task log folders (one level down, as task.sh writes)."""
    total = 0
    try:
        folders = [e.path for e in os.scandir(log_dir) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return 0
    for folder in folders:
        try:
            total += sum(e.stat(follow_symlinks=False).st_size for e in os.scandir(folder)
                         if e.is_file(follow_symlinks=False))
        except OSError:
            continue
    return total


def database_bytes(db_path: str) -> tuple:
    """(bytes of the SQLite pages in use, bytes of its WAL): deleting rows frees pages
    that later writes reuse, so the pages in use, not the file's size, are what a budget
    can hold down (the file shrinks only by VACUUM)."""
    execute = database.obj.execute_sql
    pages = execute("PRAGMA page_count").fetchone()[0]
    free = execute("PRAGMA freelist_count").fetchone()[0]
    size = execute("PRAGMA page_size").fetchone()[0]
    try:
        wal = os.stat(db_path + "-wal").st_size
    except OSError:
        wal = 0
    return (pages - free) * size, wal


def storage_use(policy: Policy, logs: int | None = None) -> dict:
    """Use against the budget: {"used_bytes", "budget_bytes", "database_bytes",
    "wal_bytes", "log_bytes"}; logs: task log bytes when already known.

    The WAL counts up to its checkpoint point: it is reused in place, and beyond that it
    only grows while a reader holds a snapshot and is cut back at a checkpoint; counting
    that would delete history for good to pay for a moment's WAL.
    """
    db_used, wal = database_bytes(policy.db_path) if policy.db_path else (0, 0)
    logs = log_bytes(policy.log_dir) if logs is None else logs
    counted_wal = min(wal, WAL_CHECKPOINT_BYTES * 1048 // 1024)  # with frame headers
    return {"used_bytes": db_used + counted_wal + logs, "budget_bytes": policy.budget,
            "database_bytes": db_used, "wal_bytes": wal, "log_bytes": logs}
