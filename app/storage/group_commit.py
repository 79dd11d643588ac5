"""Group commit on SQLite: the callbacks of one poll made durable by one fsync of the WAL.

At synchronous=FULL SQLite fdatasyncs the WAL at every commit, and that wait was most of a
callback's cost (docs/PERFORMANCE.md). The loop lane (serving.py) answers the callbacks one
poll read one after another on one thread, so that thread's connection commits at NORMAL
(WAL mode keeps the file whole at either level; NORMAL only leaves out the fsync at commit)
and, once the whole batch has run, `sync()` fdatasyncs the WAL file once. Every frame those
commits wrote is then on disk, as FULL would have left it. The lane holds back every answer
of the batch until `sync()` returned true, so no callback is answered before its commit is
durable: one transaction per callback still, one fsync per batch.

Readers on other threads and processes may see a batch's commits a few milliseconds before
that fsync; a power cut in between loses those callbacks, which were never answered
(docs/RELIABILITY.md, "Power cuts").
"""
from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger("qlshadow")


class GroupCommit:
    """The commits of the thread that made it, made durable together by sync().

    Made on the loop lane's thread, and used only there. Every connection that thread
    opens from then on commits at NORMAL (db.RouterSqliteDatabase.grouped_thread), and so
    does the one it holds already. A batch that changed no row on the same connection
    wrote no WAL frame: no fsync.
    """

    def __init__(self, database, on_failure=None):
        self.database = database  # a SQLite database in WAL mode, one connection per thread
        self.wal = database.database + "-wal"  # SQLite names the WAL after its database
        self.on_failure = on_failure  # called with the OSError of a failed fsync
        self.syncs = 0  # fsyncs done (the tests read it)
        database.grouped_thread = threading.get_ident()
        self._conn = None if database.is_closed() else database.connection()
        if self._conn is not None:
            self._conn.execute("PRAGMA synchronous = NORMAL")
        self._changes = 0 if self._conn is None else self._conn.total_changes

    def sync(self) -> bool:
        """Make this thread's commits since the last call durable; False if that failed."""
        conn = None if self.database.is_closed() else self.database.connection()
        changes = 0 if conn is None else conn.total_changes
        if conn is self._conn and changes == self._changes:
            return True
        # Something was committed; or the connection was closed (after an error) or replaced
        # since, and what the earlier one committed is synced all the same.
        self._conn = conn
        try:
            fd = os.open(self.wal, os.O_RDONLY)
        except FileNotFoundError:
            # No WAL: the last connection closed, which checkpoints it into the database
            # file and syncs that; nothing is left to make durable.
            self._changes = changes
            return True
        except OSError as exc:
            return self._failed(exc)
        try:
            os.fdatasync(fd)  # what SQLite calls at each commit at FULL on Linux
        except OSError as exc:
            return self._failed(exc)
        finally:
            os.close(fd)
        self.syncs += 1
        self._changes = changes
        return True

    def _failed(self, exc: OSError) -> bool:
        # The batch stays unanswered. SQLite keeps its commits, and the next sync covers
        # them again (the count is left behind on purpose); whether the kernel still held
        # their pages after a failed fsync is unknown, which is why nobody was answered.
        self._changes = -1
        log.error("the WAL could not be synced (%s); the callbacks of this poll go unanswered",
                  exc.strerror or exc)
        if self.on_failure is not None:
            self.on_failure(exc)
        return False
