"""The database classes: QL_DB_URL made into SQLite (router pragmas, a bounded WAL) or PostgreSQL.

Nothing here connects: make_database builds the database, bind makes it the models'
default, and each thread opens its own connection later (db/transactions.py).
"""
from __future__ import annotations

import threading
from urllib.parse import parse_qsl, unquote, urlsplit

from peewee import Database, PostgresqlDatabase, SqliteDatabase

from qlshadow.config import ConfigError, sqlite_file
from qlshadow.storage.models import database
from qlshadow.storage.peewee_compat import ConnectHook

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

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # One writer at a time on this database inside this process: SQLite allows one
        # writer anyway, and a Python lock hands the turn over without the busy handler's
        # sleep-and-retry. Across processes (or a second database object on the same file)
        # the busy timeout and the unique keys still decide.
        self.write_lock = threading.Lock()

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
