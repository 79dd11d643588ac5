"""Hot-path statements: SQL compiled once per kind of database from the models, then run
straight on the driver's cursor with named slots (Statement, slot); prebuilt adapts a
hand-written statement's placeholders to the bound driver."""
from __future__ import annotations

from peewee import Database, Value

from peewee import logger as _peewee_log

from qlshadow.storage.models import database
from qlshadow.storage.peewee_compat import connection
from qlshadow.storage.peewee_compat import driver_errors as _driver_errors


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
