"""The database: URL → SQLite (with router-friendly pragmas) or PostgreSQL, schema, transactions.

Connections are per thread and kept open across requests: waitress runs a fixed pool of
threads, so each opens one connection (and runs the pragmas) once instead of per request.
A connection that failed is closed so the next request on that thread reconnects.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from urllib.parse import parse_qsl, unquote, urlsplit

from peewee import Database, PostgresqlDatabase, SqliteDatabase

from .models import ALL_MODELS, ShadowRun, database

# Router flash and power loss: WAL with synchronous=NORMAL cannot corrupt the file and
# fsyncs only at checkpoints; a small page cache because every waitress thread has one.
SQLITE_PRAGMAS = (("synchronous", "normal"), ("foreign_keys", 1), ("cache_size", -1024))

# One writer at a time inside this process: SQLite allows one writer anyway, and a Python
# lock hands the turn over without the busy handler's sleep-and-retry. Across processes
# the busy timeout and the unique keys still decide.
_sqlite_write_lock = threading.Lock()


def make_database(url: str, timeout: float = 5.0) -> Database:
    """Build (but do not connect) the database named by a checked QL_DB_URL."""
    if url.startswith("sqlite:///"):
        path = unquote(url[len("sqlite:///"):].split("?", 1)[0])
        return SqliteDatabase(path, pragmas=SQLITE_PRAGMAS, timeout=timeout, autoconnect=False,
                              check_same_thread=False)
    parts = urlsplit(url)
    options = dict(parse_qsl(parts.query))
    kwargs = {key: value for key, value in (
        ("user", unquote(parts.username or "")), ("password", unquote(parts.password or "")),
        ("host", parts.hostname or ""), ("port", parts.port)) if value}
    kwargs.update(options)
    kwargs.setdefault("connect_timeout", max(1, int(timeout)))
    return PostgresqlDatabase(unquote(parts.path.lstrip("/")) or "postgres", autoconnect=False,
                              **kwargs)


def prebuilt(sql: str) -> str:
    """A hand-written statement with '?' placeholders, in the bound driver's style.

    The callback's statements are written out once rather than built by Peewee's query
    objects on every call; only psycopg2 needs '%s' instead of '?'.
    """
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
    """Point the models at db (one database per process)."""
    database.initialize(db)


def create_schema() -> str:
    """Create whatever tables and indexes are missing; never drops or alters data.

    Returns the journal mode on SQLite ("wal" unless the filesystem refused it), "" otherwise.
    """
    db = database.obj
    mode = ""
    ShadowRun._meta.without_rowid = is_sqlite(db)
    with db.connection_context():
        if is_sqlite(db):
            mode = db.execute_sql("PRAGMA journal_mode=wal").fetchone()[0].lower()
        with db.atomic():
            if not is_sqlite(db):
                # Two processes starting at once must not race on CREATE TABLE.
                db.execute_sql("SELECT pg_advisory_xact_lock(4460446)")
            db.create_tables(ALL_MODELS, safe=True)
    return mode


def ensure_connection() -> None:
    if database.is_closed():
        database.connect()
    elif not is_sqlite() and _hung_up(database.connection()):
        # PostgreSQL restarted since this thread last used its connection. Reconnect now,
        # before the request starts, instead of losing this callback to a 503.
        discard_connection()
        database.connect()


def _hung_up(conn) -> bool:
    """True when an idle PostgreSQL connection was closed by the server.

    An idle connection receives nothing unless the server said goodbye (a FATAL message
    or EOF), so a readable socket means it is dead; one non-blocking select, no query.
    """
    import select
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
        database.obj._state.reset()


@contextmanager
def write_transaction():
    """One write transaction: BEGIN IMMEDIATE under the process lock on SQLite."""
    db = database.obj
    if is_sqlite(db):
        with _sqlite_write_lock, db.atomic("IMMEDIATE"):
            yield
    else:
        with db.atomic():
            yield
