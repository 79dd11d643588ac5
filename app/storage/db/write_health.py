"""Whether writes work and the room they have, for /health: WriteHealth (one per app),
failure_cause (why a write failed, in words), free bytes and the storage figures."""
from __future__ import annotations

import errno
import logging
import os
import threading
import time

from qlshadow.storage.db.engine import is_sqlite
from qlshadow.storage.models import database

log = logging.getLogger("qlshadow")

SQLITE_FULL, SQLITE_IOERR = 13, 10
PG_DISK_FULL = "53100"


class WriteHealth:
    """Whether writes work, for /health: one record per app (held by its Runtime).

    Not per thread: /health must say whether writes work, whichever thread tried last. A
    failure starts an incident (logged once, with its cause); the next successful write
    ends it (logged once). No lock on the success path: it reads one attribute.
    """

    def __init__(self):
        self._incident: dict | None = None  # {"cause", "since", "failures"} while failing
        self._lock = threading.Lock()

    def note_ok(self) -> None:
        """Record that a write transaction committed; ends a failure incident (logged once)."""
        if self._incident is None:
            return
        with self._lock:
            incident = self._incident
            if incident is not None:
                log.warning("writes succeed again after %d failed (%s)", incident["failures"],
                            incident["cause"])
                self._incident = None

    def note_failed(self, exc: BaseException) -> None:
        """Record that a write failed and why; the cause is logged once per incident."""
        cause = failure_cause(exc)
        with self._lock:
            if self._incident is None:
                self._incident = {"cause": cause, "since": int(time.time()), "failures": 1}
                log.warning("writes are failing: %s; writes are refused until one succeeds", cause)
            else:
                self._incident["failures"] += 1
                self._incident["cause"] = cause

    def state(self) -> dict:
        """{"ok", "cause", "since", "failures"} of the last write (ok until one fails)."""
        incident = self._incident
        if incident is None:
            return {"ok": True, "cause": None, "since": None, "failures": 0}
        return {"ok": False, **incident}


def failure_cause(exc: BaseException) -> str:
    """Why a write failed, in words: "disk full" for SQLITE_FULL/ENOSPC, else the real error.

    Peewee wraps the driver's error and a failed COMMIT may be followed by other errors, so
    the whole chain is searched for the first error that names a cause.
    """
    seen, node, first = set(), exc, None
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        code = getattr(node, "sqlite_errorcode", None)
        if code is not None and code & 0xFF == SQLITE_FULL:
            return "disk full"
        if isinstance(node, OSError) and node.errno == errno.ENOSPC:
            return "disk full"
        if getattr(node, "pgcode", None) == PG_DISK_FULL:
            return "disk full (PostgreSQL server)"
        if first is None and str(node).strip():
            first = f"{type(node).__name__}: {str(node).strip().splitlines()[0]}"
        node = node.__cause__ or node.__context__
    if is_sqlite() and free_bytes(os.path.dirname(os.path.abspath(database.obj.database))) == 0:
        return "disk full"  # a write that SQLite reported otherwise, on a partition with no room
    return first or type(exc).__name__


def free_bytes(directory: str) -> int | None:
    """Bytes an unprivileged writer may still use on the partition holding directory."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def storage_figures(data_dir: str) -> dict:
    """Database and WAL bytes and the synchronous level (SQLite; null on PostgreSQL), free bytes."""
    db_bytes = wal_bytes = synchronous = None
    if is_sqlite():
        path = database.obj.database
        db_bytes = _size(path)
        wal_bytes = _size(path + "-wal") or 0
        synchronous = database.obj.synchronous
    return {"db_bytes": db_bytes, "wal_bytes": wal_bytes, "free_bytes": free_bytes(data_dir),
            "synchronous": synchronous}


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None
