"""The schema's version, stored in the database, and the runner that brings a database to it.

Start-up (db.open_database) reads the version once; the callback path never looks at it.
A database with no tables is created at the latest version and stamped. A database with
tables but no version comes from a release before versions (version 0) and is brought up
step by step (schema/steps.py). Each step is one transaction that also writes its
version, taken under the schema lock (an advisory lock on PostgreSQL, BEGIN IMMEDIATE on
SQLite), so two processes starting at once run each step once, and a failed step (a full
disk, say) leaves the database at the version before it, intact.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from peewee import Database, DatabaseError, SqliteDatabase

from qlshadow.errors import Unavailable
from qlshadow.storage.models import ALL_MODELS, ShadowRun, database
from qlshadow.storage.peewee_compat import set_without_rowid
from qlshadow.storage.schema.helpers import first_line, schema_lock
from qlshadow.storage.schema.slim_runs import move_old_runs
from qlshadow.storage.schema.steps import LATEST, STEPS

log = logging.getLogger("qlshadow")

VERSION_TABLE = "schema_version"
# SQLite page size of a new database: slim Runs fill 1 KiB pages, where 4 KiB pages made a
# callback rewrite four times the bytes (docs/STORAGE.md has the measurements).
PAGE_SIZE = 1024
UPGRADE_WAIT_MS = 120_000  # another process's upgrade (a re-key copies the Run table) may be slow


class SchemaError(Unavailable):
    """The database's schema is not one this code can use or bring up to date."""


def upgrade_schema(cause: Callable[[BaseException], str] = first_line,
                   host_name: str | None = None) -> str:
    """Bring the bound database to the latest version (fresh: create and stamp it).

    Returns the journal mode on SQLite ("wal" unless the filesystem refused it), "" otherwise.
    Raises SchemaError, with one line that says why, when the version is newer than this
    code's or a step fails; cause(error) words a failed step's error (db.failure_cause).
    """
    db = database.obj
    sqlite = isinstance(db, SqliteDatabase)
    set_without_rowid(ShadowRun, sqlite)
    mode = ""
    with db.connection_context():
        if sqlite:
            # A page size holds only from the file's first write; an existing database
            # keeps its own (changing it takes a VACUUM: free space the size of the file).
            if db.execute_sql("PRAGMA page_count").fetchone()[0] == 0:
                db.execute_sql(f"PRAGMA page_size = {getattr(db, 'page_size', None) or PAGE_SIZE}")
            mode = db.execute_sql("PRAGMA journal_mode=wal").fetchone()[0].lower()
        if _current(db) == LATEST and not _missing_tables(db):  # the usual start: no lock
            move_old_runs(db)
            _note_boot(db, host_name)
            return mode
        if sqlite:
            waited = db.execute_sql("PRAGMA busy_timeout").fetchone()[0]
            db.execute_sql(f"PRAGMA busy_timeout = {max(waited, UPGRADE_WAIT_MS)}")
        try:
            _upgrade(db, cause)
            move_old_runs(db)
        finally:
            if sqlite:
                db.execute_sql(f"PRAGMA busy_timeout = {waited}")
        _note_boot(db, host_name)
    return mode


def _note_boot(db: Database, host_name: str | None = None) -> None:
    """Close the Runs a reboot left open (storage/reboot.py); a failure only delays it.
    host_name: QL_HOST_NAME (None: the system's)."""
    from qlshadow.storage.reboot import note_boot
    try:
        note_boot(db, host=host_name)
    except DatabaseError as exc:
        log.warning("cannot record this boot, so Runs left open by a reboot stay open until "
                    "the next start: %s", first_line(exc))


def check_version() -> None:
    """Refuse a database whose schema is newer than this code (read-only opens)."""
    db = database.obj
    if not db.is_closed():  # a caller's open connection
        _current(db)
        return
    with db.connection_context():
        _current(db)


def _current(db: Database) -> int | None:
    """The stored version; 0 for a release before versions, None for an empty database."""
    if db.table_exists(VERSION_TABLE):
        version = db.execute_sql(f'SELECT "version" FROM "{VERSION_TABLE}"').fetchone()[0]
    elif db.table_exists("crons"):
        version = 0
    else:
        return None
    if version > LATEST:
        raise SchemaError(f"the database's schema is version {version}, newer than this "
                          f"qlshadow's {LATEST}: run the release that wrote it, or a later one")
    return version


def _missing_tables(db: Database) -> list:
    """The models' tables that a database at the latest version lacks."""
    present = set(db.get_tables())
    return [m._meta.table_name for m in ALL_MODELS if m._meta.table_name not in present]


def _upgrade(db: Database, cause: Callable[[BaseException], str]) -> None:
    ran = 0
    while True:
        version, done = None, None
        try:
            with schema_lock(db):
                # Read again under the lock: another process may have gone ahead meanwhile.
                version = _current(db)
                if version == LATEST:
                    missing = _missing_tables(db)
                    if missing:  # dropped by hand: made again empty, as `db init` promises
                        db.create_tables([m for m in ALL_MODELS
                                          if m._meta.table_name in missing])
                        log.warning("missing table(s) created again: %s", ", ".join(missing))
                    return
                if version is None:
                    db.create_tables(ALL_MODELS)
                else:
                    done = STEPS[version][1](db) or f"schema upgraded to version {version + 1}"
                _stamp(db, LATEST if version is None else version + 1)
        except DatabaseError as exc:  # the step, or the COMMIT (a full disk fails there)
            what = ("create the tables" if version is None or version == LATEST
                    else STEPS[version][0])
            left = ("the database is unchanged" if ran == 0 else
                    f"the database stays at schema version {version}")
            raise SchemaError(f"cannot {what}: {cause(exc)}; {left}") from None
        if version is None:
            log.info("database created at schema version %d", LATEST)
            return
        ran += 1
        log.warning("%s", done)  # a warning: it shows once, whichever command opened it


def _stamp(db: Database, version: int) -> None:
    """Write the version, in the transaction of the change it records."""
    if db.table_exists(VERSION_TABLE):
        db.execute_sql(f'UPDATE "{VERSION_TABLE}" SET "version" = {int(version)}')
    else:
        db.execute_sql(f'CREATE TABLE "{VERSION_TABLE}" ("version" INTEGER NOT NULL)')
        db.execute_sql(f'INSERT INTO "{VERSION_TABLE}" ("version") VALUES ({int(version)})')
