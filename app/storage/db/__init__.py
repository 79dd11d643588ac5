"""The database: the names the rest of qlshadow uses, from the modules that hold them.

- engine: QL_DB_URL made into SQLite (router pragmas, a bounded WAL) or PostgreSQL;
- opening: open_database, the one way to open it (checks, snapshot, schema, binding);
- transactions: this thread's connection, write transactions, slices and savepoints;
- statements: hot-path statements compiled once and run on the driver's cursor;
- write_health: whether writes work and the room they have, for /health.

`database` is the models' database (storage/models.py), here because every caller of
these functions uses it too.
"""
from __future__ import annotations

from qlshadow.storage.db.engine import (SQLITE_PRAGMAS, WAL_CHECKPOINT_BYTES, WAL_CHECKPOINT_PAGES,
                                        WAL_LIMIT_BYTES, RouterSqliteDatabase, bind, checkpoint,
                                        describe, is_sqlite, make_database, wal_checkpoint_pages)
from qlshadow.storage.db.opening import open_database
from qlshadow.storage.db.statements import Statement, prebuilt, slot
from qlshadow.storage.db.transactions import (connected, discard_connection, ensure_connection,
                                              run_write, savepoint, write_slice, write_transaction)
from qlshadow.storage.db.write_health import (WriteHealth, failure_cause, free_bytes,
                                              storage_figures)
from qlshadow.storage.models import database

__all__ = ["SQLITE_PRAGMAS", "WAL_CHECKPOINT_BYTES", "WAL_CHECKPOINT_PAGES", "WAL_LIMIT_BYTES",
           "RouterSqliteDatabase", "Statement", "WriteHealth", "bind", "checkpoint", "connected",
           "database", "describe", "discard_connection", "ensure_connection", "failure_cause",
           "free_bytes", "is_sqlite", "make_database", "open_database", "prebuilt", "run_write",
           "savepoint", "slot", "storage_figures", "wal_checkpoint_pages", "write_slice",
           "write_transaction"]
