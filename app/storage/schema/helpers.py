"""What steps are written with: helpers that skip what is already there (a table, its
indexes, a column), the schema lock each step and each batch of a move runs under, and an
error's first line for the log."""
from __future__ import annotations

from contextlib import contextmanager

from peewee import Database, SqliteDatabase

from qlshadow.storage.peewee_compat import create_indexes

PG_LOCK_KEY = 4460446  # pg_advisory_xact_lock key: one schema change at a time per database


def add_table(db: Database, model) -> None:
    """Create the model's table with its indexes if the table is missing."""
    db.create_tables([model], safe=True)


def add_indexes(model) -> None:
    """Create those of the model's declared indexes that are missing (by name)."""
    create_indexes(model)


def add_column(db: Database, model, field_name: str) -> None:
    """Add the model's column if the table lacks it (nullable, or with a default)."""
    from playhouse.migrate import SchemaMigrator, migrate
    field = model._meta.fields[field_name]
    table = model._meta.table_name
    if field.column_name not in {c.name for c in db.get_columns(table)}:
        migrate(SchemaMigrator.from_database(db).add_column(table, field.column_name, field))


@contextmanager
def schema_lock(db: Database):
    """A write transaction that holds the schema lock until it ends."""
    if isinstance(db, SqliteDatabase):
        with db.atomic("IMMEDIATE"):
            yield
        return
    with db.atomic():
        db.execute_sql("SELECT pg_advisory_xact_lock(%s)", (PG_LOCK_KEY,))
        yield


def first_line(exc: BaseException) -> str:
    """An error's first line (its class name when it says nothing)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
