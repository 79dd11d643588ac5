"""Every Peewee name qlshadow uses that Peewee does not document, and nowhere else.

They were read from Peewee 4.5 (setup.cfg pins TESTED; the OpenWrt package bundles 4.5.3).
open_database calls check() first: on another Peewee that lacks one of them, qlshadow
refuses to start with one line naming it, rather than fail later on a callback.
"""
from __future__ import annotations

import peewee

TESTED = "peewee>=4.5,<4.6"

# Turns a DB-API driver's errors into Peewee's classes (IntegrityError ...), as Peewee
# does around its own statements; used around the hot statements run on the raw cursor.
driver_errors = getattr(peewee, "__exception_wrapper__", None)


def connection(db: peewee.Database):
    """This thread's open DB-API connection, without Peewee's checks (the hot path)."""
    return db._state.conn


def forget_connection(db: peewee.Database) -> None:
    """Drop this thread's connection state after a close that failed."""
    db._state.reset()


def create_table(model) -> None:
    """CREATE TABLE for the model as it is declared (no IF NOT EXISTS)."""
    model._schema.create_table()


def create_indexes(model) -> None:
    """CREATE INDEX IF NOT EXISTS for each of the model's indexes."""
    model._schema.create_indexes(safe=True)


def set_without_rowid(model, value: bool) -> None:
    """Whether the model's table is made WITHOUT ROWID (SQLite only)."""
    model._meta.without_rowid = value


class ConnectHook:
    """Mixed into a Database subclass: on_connect(conn) runs on each new connection after
    Peewee's own setup (the pragmas), through the hook Peewee calls for that."""

    def _add_conn_hooks(self, conn):
        super()._add_conn_hooks(conn)
        self.on_connect(conn)

    def on_connect(self, conn) -> None:
        pass


def missing(module=peewee, model=None) -> list:
    """The names above that this Peewee (or the given model) lacks, as 'module.name'."""
    absent = []
    if not hasattr(module, "__exception_wrapper__"):
        absent.append("peewee.__exception_wrapper__")
    if not hasattr(getattr(module, "SqliteDatabase", None), "_add_conn_hooks"):
        absent.append("peewee.SqliteDatabase._add_conn_hooks")
    sqlite = getattr(module, "SqliteDatabase", None)
    state = getattr(sqlite(None), "_state", None) if sqlite else None  # deferred: no file
    if not (hasattr(state, "conn") and hasattr(state, "reset")):
        absent.append("Database._state.conn/reset")
    if model is not None:
        schema = getattr(model, "_schema", None)
        if not (hasattr(schema, "create_table") and hasattr(schema, "create_indexes")):
            absent.append("Model._schema.create_table/create_indexes")
        if not hasattr(getattr(model, "_meta", None), "without_rowid"):
            absent.append("Model._meta.without_rowid")
    return absent


def check(model=None) -> str | None:
    """One line naming the first missing name and the tested range, or None when all are there."""
    absent = missing(peewee, model)
    if not absent:
        return None
    return (f"Peewee {getattr(peewee, '__version__', '?')} has no {absent[0]}, which qlshadow "
            f"uses; install {TESTED}")
