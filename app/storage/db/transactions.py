"""This thread's connection and its write transactions.

Connections are per thread and kept open across requests: waitress runs a fixed pool of
threads, so each opens one connection (and runs the pragmas) once instead of per request.
A connection that failed is closed so the next request on that thread reconnects.
On SQLite a write transaction is BEGIN IMMEDIATE under the database's write lock;
long work (`qlshadow prune`) writes in slices that leave the lock free between them.
"""
from __future__ import annotations

import select
import time
from contextlib import contextmanager

from qlshadow.storage.db.engine import is_sqlite
from qlshadow.storage.models import database
from qlshadow.storage.peewee_compat import connection, forget_connection
from qlshadow.storage.peewee_compat import driver_errors as _driver_errors



def ensure_connection() -> None:
    if database.is_closed():
        database.connect()
    elif not is_sqlite() and _hung_up(database.connection()):
        # PostgreSQL restarted since this thread last used its connection. Reconnect now,
        # before the request starts, instead of losing this callback to an error.
        discard_connection()
        database.connect()


def _hung_up(conn) -> bool:
    """True when an idle PostgreSQL connection was closed by the server.

    An idle connection receives nothing unless the server said goodbye (a FATAL message
    or EOF), so a readable socket means it is dead; one non-blocking select, no query.
    """
    try:
        return bool(conn.closed) or bool(select.select([conn.fileno()], [], [], 0)[0])
    except (OSError, ValueError):
        return True


@contextmanager
def connected():
    """Use this thread's open connection, or open one for the block (CLI and start-up)."""
    if database.is_closed():
        with database.connection_context():
            yield
    else:
        yield


def discard_connection() -> None:
    """Close this thread's connection after an error, so the next request reconnects."""
    try:
        database.close()
    except Exception:  # a broken connection may fail to close; it is gone either way
        forget_connection(database.obj)


def write_transaction():
    """One write transaction: BEGIN IMMEDIATE under the database's write lock on SQLite."""
    db = database.obj
    if is_sqlite(db):
        return _SqliteWrite(db)
    return db.atomic()


# Long write work (`qlshadow prune`) runs in slices, and after each one leaves the write lock
# free for a while: without a pause the next slice took the lock back first every time, and
# the server's callbacks, waiting in SQLite's busy handler, failed with "database is locked"
# after 5 s. That handler looks again after 1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50 ms and
# then every 100 ms, so a waiter that began during a slice of t ms looks again within about
# half of t (at most 100 ms) after it ends: the pause is 1.5 t, from 30 to 120 ms, and a
# callback waits at most about one slice.
SLICE_PAUSE = (0.03, 0.12)


@contextmanager
def write_slice():
    """One slice of long write work: a write transaction, then (SQLite) a pause holding no lock."""
    began = time.monotonic()
    with write_transaction():
        yield
    if is_sqlite():  # PostgreSQL locks rows, not the database: nobody waits for the slice
        low, high = SLICE_PAUSE
        time.sleep(min(high, max(low, 1.5 * (time.monotonic() - began))))


class _SqliteWrite:
    """BEGIN IMMEDIATE ... COMMIT on the driver's connection, under the database's write lock.

    What Peewee's atomic("IMMEDIATE") does, in about 6 µs less per transaction (its context
    managers and cursor checks; docs/PERFORMANCE.md). It stands on Peewee's transaction
    stack while open, so a nested database.atomic() is a savepoint and Peewee's own calls
    see a transaction; a failure rolls back through the database class, like Peewee's.
    """
    __slots__ = ("db",)

    def __init__(self, db):
        self.db = db

    def __enter__(self):
        self.db.write_lock.acquire()
        try:
            with _driver_errors:
                self.db.connection().execute("BEGIN IMMEDIATE")
        except BaseException:
            self.db.write_lock.release()
            raise
        self.db.push_transaction(self)

    def __exit__(self, kind, error, traceback):
        db = self.db
        try:
            db.pop_transaction()
            if kind is None:
                try:
                    with _driver_errors:
                        db.connection().execute("COMMIT")
                except BaseException:
                    db.rollback()  # SQLite may have rolled back already (a full disk)
                    raise
            else:
                db.rollback()
        finally:
            db.write_lock.release()
        return False


class _Savepoint:
    """SAVEPOINT ... RELEASE under a fixed name, rolled back to on any error (both databases).

    Straight on the driver's cursor: Peewee's savepoint names each one afresh and costs
    about 5 µs more per use; a fixed name keeps the statements identical, so the driver
    keeps them prepared. Only for a block that runs no database.atomic() of its own.
    """
    __slots__ = ("_begin", "_release", "_undo")

    def __init__(self, name: str):
        quoted = '"' + name.replace('"', '""') + '"'
        self._begin = "SAVEPOINT " + quoted
        self._release = "RELEASE SAVEPOINT " + quoted
        self._undo = "ROLLBACK TO SAVEPOINT " + quoted

    def __enter__(self):
        # The transaction around it holds this thread's connection open: no need to ask
        # Peewee for it (two calls each way, on every Shadow callback).
        with _driver_errors:
            connection(database.obj).cursor().execute(self._begin)

    def __exit__(self, kind, error, traceback):
        with _driver_errors:
            cursor = connection(database.obj).cursor()
            if kind is not None:
                cursor.execute(self._undo)
            cursor.execute(self._release)
        return False


_savepoints: dict = {}


def savepoint(name: str) -> _Savepoint:
    """A savepoint of the current transaction under a fixed name (rolled back on error)."""
    found = _savepoints.get(name)
    if found is None:
        found = _savepoints[name] = _Savepoint(name)
    return found


def run_write(fn, *args):
    """Run fn(*args) as one write transaction on this thread's connection; returns its result."""
    with write_transaction():
        return fn(*args)
