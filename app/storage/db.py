"""The database: URL → SQLite (with router-friendly pragmas) or PostgreSQL, transactions.

Connections are per thread and kept open across requests: waitress runs a fixed pool of
threads, so each opens one connection (and runs the pragmas) once instead of per request.
A connection that failed is closed so the next request on that thread reconnects.
"""
from __future__ import annotations

import errno
import logging
import os
import select
import sys
import threading
import time
from contextlib import contextmanager
from urllib.parse import parse_qsl, unquote, urlsplit

from peewee import (Database, OperationalError, PostgresqlDatabase,
                    SqliteDatabase, Value)

from peewee import logger as _peewee_log

from qlshadow.config import ConfigError, sqlite_file
from qlshadow.errors import Unavailable
from qlshadow.storage.models import ShadowRun, database
from qlshadow.storage.peewee_compat import ConnectHook, check, connection, forget_connection
from qlshadow.storage.peewee_compat import driver_errors as _driver_errors

log = logging.getLogger("qlshadow")

# Router flash and power loss: WAL cannot corrupt the file at either synchronous level;
# FULL (the default, QL_SQLITE_SYNCHRONOUS) fsyncs the WAL at every commit so an answered
# callback survives a power cut, NORMAL fsyncs only at checkpoints and a cut loses the
# commits since the last one (docs/RELIABILITY.md, "Power cuts", measures both).
# A 512 KiB page cache per connection: the callback path touches a
# few pages, and a larger cache only kept what the status page and the gate had read
# (docs/PERFORMANCE.md, the status page and memory).
# A bounded WAL: after WAL_CHECKPOINT_PAGES pages (1 MiB of 4 KiB pages) a commit
# checkpoints (PASSIVE, the only automatic mode) and the next writer starts the WAL over.
# A WAL file that grew past WAL_LIMIT_BYTES (a long reader held a checkpoint back) is
# truncated back to it. So the WAL stays within 1 MiB plus one transaction instead of
# SQLite's 4 MiB default that once filled a 2 MB partition; docs/CONTRACT.md "Storage"
# states the bound. The limit sits a quarter above the checkpoint point, above what one
# cycle reaches (256 frames of 4 KiB + 24 bytes, plus the last transaction's): at exactly
# 1 MiB every cycle truncated the file and grew it again, a metadata write and a slower
# fdatasync each time (docs/PERFORMANCE.md).
WAL_CHECKPOINT_PAGES = 256
WAL_CHECKPOINT_BYTES = WAL_CHECKPOINT_PAGES * 4096  # per page size: wal_checkpoint_pages
WAL_LIMIT_BYTES = 1280 * 1024
SQLITE_PRAGMAS = (("synchronous", "full"), ("foreign_keys", 1), ("cache_size", -512),
                  ("wal_autocheckpoint", WAL_CHECKPOINT_PAGES),
                  ("journal_size_limit", WAL_LIMIT_BYTES))


class RouterSqliteDatabase(ConnectHook, SqliteDatabase):
    """SqliteDatabase whose rollback does nothing when SQLite already rolled back.

    A COMMIT that fails with SQLITE_FULL (or IOERR) makes SQLite roll the transaction back
    itself; Peewee then sends ROLLBACK, whose "cannot rollback - no transaction is active"
    used to replace the real cause (a full disk) in the log and in the raised error.
    """

    synchronous = "full"  # the QL_SQLITE_SYNCHRONOUS level its connections set; /health shows it
    # The thread whose connections commit at NORMAL because a group commit fsyncs the WAL
    # for them before their callbacks are answered (group_commit.py); None: no such thread.
    grouped_thread = None
    page_size = None  # a new file's page size when not schema.PAGE_SIZE (make_database)
    checkpoint_pages = None  # wal_autocheckpoint as given, else WAL_CHECKPOINT_BYTES' pages

    def rollback(self):
        if not self.is_closed() and not self.connection().in_transaction:
            return
        super().rollback()

    def on_connect(self, conn):
        # The checkpoint point is a number of pages: keep it at the same bytes whatever the
        # file's page size (1 KiB for a new database, 4 KiB for one made before).
        conn.execute(f"PRAGMA wal_autocheckpoint = {self.checkpoint_pages or wal_checkpoint_pages(conn)}")
        if threading.get_ident() == self.grouped_thread:
            conn.execute("PRAGMA synchronous = NORMAL")


def wal_checkpoint_pages(conn) -> int:
    """wal_autocheckpoint for a connection's database: WAL_CHECKPOINT_BYTES of its pages."""
    return WAL_CHECKPOINT_BYTES // conn.execute("PRAGMA page_size").fetchone()[0]

# One writer at a time inside this process: SQLite allows one writer anyway, and a Python
# lock hands the turn over without the busy handler's sleep-and-retry. Across processes
# the busy timeout and the unique keys still decide.
_sqlite_write_lock = threading.Lock()


def make_database(url: str, timeout: float = 5.0, synchronous: str = "full",
                  pragmas: tuple = ()) -> Database:
    """Build (but do not connect) the database named by a checked QL_DB_URL.

    pragmas (SQLite only; Settings.sqlite_pragmas) replace or add to SQLITE_PRAGMAS: a
    wal_autocheckpoint there is kept as given, a page_size is what schema gives a new file.
    """
    path = sqlite_file(url)
    if path is not None:
        chosen = dict(SQLITE_PRAGMAS, synchronous=synchronous)
        chosen.update(pragmas)
        page_size = chosen.pop("page_size", None)
        sqlite_db = RouterSqliteDatabase(path, pragmas=tuple(chosen.items()), timeout=timeout,
                                         autoconnect=False, check_same_thread=False)
        sqlite_db.synchronous = synchronous
        sqlite_db.page_size = int(page_size) if page_size else None
        if "wal_autocheckpoint" in dict(pragmas):
            sqlite_db.checkpoint_pages = int(dict(pragmas)["wal_autocheckpoint"])
        return sqlite_db
    try:
        import psycopg2  # noqa: F401 -- only PostgreSQL needs it; say so before connecting
    except ImportError:
        raise ConfigError("QL_DB_URL names PostgreSQL, but its driver is not installed: "
                          "pip install 'qlshadow[postgres]'") from None
    parts = urlsplit(url)
    options = dict(parse_qsl(parts.query))
    kwargs = {key: value for key, value in (
        ("user", unquote(parts.username or "")), ("password", unquote(parts.password or "")),
        ("host", parts.hostname or ""), ("port", parts.port)) if value}
    kwargs.update(options)
    kwargs.setdefault("connect_timeout", max(1, int(timeout)))
    return PostgresqlDatabase(unquote(parts.path.lstrip("/")) or "postgres", autoconnect=False,
                              **kwargs)


class _Slot:
    """Where a value goes in a compiled statement; filled by name on every call."""
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


def slot(name: str) -> Value:
    """A named placeholder for a Statement (never converted: it is not a value yet)."""
    return Value(_Slot(name), converter=False)


class Statement:
    """A hot-path statement built from the models by Peewee once per kind of database.

    Table and column names come from the models, never typed twice; building Peewee query
    objects on every call was most of a callback's CPU, so the SQL is compiled on first use
    and then only executed, with its slots filled by name.
    """
    __slots__ = ("_build", "_compiled")

    def __init__(self, build):
        self._build = build  # () -> a Peewee query using slot(name) for every value
        self._compiled: dict = {}  # database class -> (sql, ((slot name | None, constant), ...))

    def sql(self, db: Database | None = None) -> tuple:
        """(sql, parameter order) for db (default: the bound database)."""
        db = db or database.obj
        compiled = self._compiled.get(type(db))
        if compiled is None:
            sql, params = db.get_sql_context().sql(self._build()).query()
            order = tuple((p.name, None) if isinstance(p, _Slot) else (None, p) for p in params)
            compiled = self._compiled[type(db)] = (sql, order)
        return compiled

    def execute(self, values: dict):
        """Run the statement on this thread's connection; returns the cursor.

        Straight on the driver's cursor (Peewee's execute_sql adds a few microseconds of
        checks per statement), logged like Peewee's and with its mapping of driver errors, so
        callers still see peewee.IntegrityError, OperationalError and the rest.
        """
        db = database.obj
        sql, order = self._compiled.get(type(db)) or self.sql(db)
        params = [values[name] if name is not None else constant for name, constant in order]
        _peewee_log.debug((sql, params))  # as Peewee logs every statement it runs
        with _driver_errors:
            cursor = connection(db).cursor()
            cursor.execute(sql, params)
        return cursor


def prebuilt(sql: str) -> str:
    """A hand-written statement with '?' placeholders, in the bound driver's style (retention)."""
    param = database.obj.param
    return sql if param == "?" else sql.replace("?", param)


def is_sqlite(db: Database | None = None) -> bool:
    return isinstance(db or database.obj, SqliteDatabase)


def describe(db: Database) -> str:
    """A short, password-free name of the database for the start-up line."""
    if is_sqlite(db):
        return f"sqlite:{db.database}"
    params = db.connect_params
    return f"postgresql://{params.get('host', 'localhost')}:{params.get('port', 5432)}/{db.database}"


def bind(db: Database) -> None:
    """Make db the models' default database (the one outside any app's request)."""
    database.initialize(db)


def open_database(settings, create: bool = True) -> tuple:
    """The one way to open the database (app factory, CLI, tests): bind the models to it.

    With create, the data directory is made if missing and the schema is created or
    upgraded to this code's version (app/storage/schema.py; never dropping data). Without it
    (read-only commands), nothing is created and no write lock is taken: a database that
    does not exist yet is an error. Either way a schema newer than the code is refused.
    With create, a missing SQLite database is first restored from its snapshot
    (app/storage/backup.py), so that nothing makes an empty one in its place.
    Returns (database, journal mode on SQLite or "").
    """
    problem = check(ShadowRun)  # before anything is opened or made
    if problem:
        raise ConfigError(problem)
    _check_data_dir(settings.data_dir, create)
    if create:
        _restore_snapshot(settings)
    db = make_database(settings.db_url, settings.db_timeout, settings.sqlite_synchronous,
                       settings.sqlite_pragmas)
    bind(db)
    if is_sqlite(db):
        _check_sqlite_file(db.database, create)
    from qlshadow.storage import schema  # start-up only: the callback path never needs it
    if not create:
        schema.check_version()
        return db, ""
    try:
        return db, schema.upgrade_schema(failure_cause, getattr(settings, "host_name", None))
    except OperationalError as exc:
        if is_sqlite(db):
            raise Unavailable(f"cannot open the SQLite database {db.database}: "
                              f"{_sqlite_cause(db.database, exc)}") from None
        raise


def _restore_snapshot(settings) -> None:
    """A database missing beside its snapshot (a firmware upgrade kept only the snapshot)
    comes back before anything creates an empty one; one line says so. Without a snapshot
    file (every start but the first after an upgrade) app/storage/backup.py is not even loaded."""
    from qlshadow.config import SNAPSHOT_SUFFIX, sqlite_file
    db_file = sqlite_file(settings.db_url)
    if db_file is None or not os.path.isfile(db_file + SNAPSHOT_SUFFIX):
        return
    from qlshadow.storage.backup import restore
    done = restore(settings)
    if done:
        print(f"qlshadow: {done}", file=sys.stderr, flush=True)


def _check_data_dir(path: str, create: bool) -> None:
    if os.path.isdir(path):
        return
    if os.path.exists(path):
        raise ConfigError(f"QL_DATA_DIR={path!r} is not a directory")
    if not create:
        return
    try:
        # Only the data directory itself (and its parents) is ours to create; 0700 because
        # it holds the database, tokens and task logs.
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"QL_DATA_DIR={path!r} cannot be created: {exc.strerror}") from None


def _check_sqlite_file(path: str, create: bool) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConfigError(f"QL_DB_URL: the directory of the SQLite file {path} does not exist")
    if not create and not os.path.exists(path):
        raise Unavailable(f"there is no database at {path} yet; "
                          "run `qlshadow db init` or start `qlshadow serve` first")
    if os.path.isdir(path):
        raise ConfigError(f"QL_DB_URL: the SQLite path {path} is a directory")


def _sqlite_cause(path: str, exc: Exception) -> str:
    """Why SQLite could not open or write path, in words an operator can act on."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"its directory {directory} is not writable by this user"
    if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
        return "the file is not readable and writable by this user (owned by another user?)"
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


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
    """One write transaction: BEGIN IMMEDIATE under the process lock on SQLite."""
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
    """BEGIN IMMEDIATE ... COMMIT on the driver's connection, under the process write lock.

    What Peewee's atomic("IMMEDIATE") does, in about 6 µs less per transaction (its context
    managers and cursor checks; docs/PERFORMANCE.md). It stands on Peewee's transaction
    stack while open, so a nested database.atomic() is a savepoint and Peewee's own calls
    see a transaction; a failure rolls back through the database class, like Peewee's.
    """
    __slots__ = ("db",)

    def __init__(self, db):
        self.db = db

    def __enter__(self):
        _sqlite_write_lock.acquire()
        try:
            with _driver_errors:
                self.db.connection().execute("BEGIN IMMEDIATE")
        except BaseException:
            _sqlite_write_lock.release()
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
            _sqlite_write_lock.release()
        return False


# --- the outcome of the last write, for /health -------------------------------------------

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


def checkpoint() -> None:
    """Copy the WAL into the database and truncate it to zero bytes (SQLite; `prune`).

    Without waiting: while a reader (the gate over a long window) keeps an older snapshot,
    a TRUNCATE checkpoint waits in the busy handler holding the write lock, and every
    callback would wait with it. Then it copies what it can, and a later one truncates.
    """
    if is_sqlite():
        db = database.obj
        db.execute_sql("PRAGMA busy_timeout = 0")
        try:
            db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            db.execute_sql(f"PRAGMA busy_timeout = {int(db.timeout * 1000)}")


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
