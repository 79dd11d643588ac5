"""Opening the database (app factory, CLI, tests): checks of the data directory and the
SQLite file, a snapshot restored in place of a missing database, the schema brought up to
date (storage/schema, loaded at start-up only), and the models bound to it."""
from __future__ import annotations

import os
import sys

from peewee import OperationalError

from qlshadow.config import ConfigError
from qlshadow.errors import Unavailable
from qlshadow.storage.db.engine import bind, is_sqlite, make_database
from qlshadow.storage.db.write_health import failure_cause
from qlshadow.storage.models import ShadowRun
from qlshadow.storage.peewee_compat import check


def open_database(settings, create: bool = True) -> tuple:
    """The one way to open the database (app factory, CLI, tests): bind the models to it.

    With create, the data directory is made if missing and the schema is created or
    upgraded to this code's version (app/storage/schema/; never dropping data). Without it
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
    # start-up only: the callback path never needs the schema
    from qlshadow.storage.schema.runner import check_version, upgrade_schema
    if not create:
        check_version()
        return db, ""
    try:
        return db, upgrade_schema(failure_cause, getattr(settings, "host_name", None))
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
    # Asked again: another process starting at the same moment may have just made it.
    if os.path.exists(path) and not os.path.isdir(path):
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
    said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if said == "disk I/O error" and _free_bytes(directory) < _SHM_BYTES:
        # SQLite says so when the partition has no room for the 32 KiB -shm file of WAL mode.
        return f"disk full: {directory} has no room for SQLite's shared-memory file ({said})"
    return said


_SHM_BYTES = 32 * 1024


def _free_bytes(directory: str) -> int:
    try:
        found = os.statvfs(directory)
    except OSError:
        return _SHM_BYTES  # unknown: the message SQLite gave stands
    return found.f_bavail * found.f_frsize
