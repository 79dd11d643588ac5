"""Databases as older releases made them, with rows as their writers left them.

For the tests of the schema's upgrade steps (app/storage/schema/): a release before versions
(version 0) in each shape it shipped, and any later version reached through the steps.
"""
from __future__ import annotations

import os

from peewee import CompositeKey

from qlshadow.storage import db, schema
from qlshadow.storage.models import (ALL_MODELS, App, Cron, RunningInstance, ShadowFailure,
                                     ShadowRun, Token)
from qlshadow.storage.schema import RunV1, runner
from qlshadow.core.shadow.reader import logical_row
from qlshadow.core.shadow.ids import attempt_id, run_id
from qlshadow.core.shadow.writer import cron_revision


class RequestKeyedRun(RunV1):
    """The older table: keyed by (project_id, idempotency_key), ordered by an index."""

    class Meta:
        table_name = "shadow_runs"
        primary_key = CompositeKey("project_id", "idempotency_key")


RequestKeyedRun.add_index(RequestKeyedRun.index(RequestKeyedRun.accepted_at, RequestKeyedRun.id,
                                                name="shadow_runs_accepted"))


def request_keyed_database(db_url: str):
    """A database at db_url with every table as the release before the Run key made it,
    bound to the models; empty, its connection closed."""
    database = db.make_database(db_url)
    db.bind(database)
    if db.is_sqlite(database):
        os.makedirs(os.path.dirname(database.database), exist_ok=True)
    RequestKeyedRun._meta.without_rowid = db.is_sqlite(database)
    with database.connection_context():
        database.create_tables((Cron, RunningInstance, App, Token, RequestKeyedRun,
                                ShadowFailure))
        _drop_added_columns(database)
    return database


# Indexes and columns that versioned steps added: the release before versions had neither.
ADDED_BY_STEPS: tuple = ()
COLUMNS_ADDED_BY_STEPS = (("crons", "grace"), ("crons", "alert_state"), ("crons", "alert_after"),
                          ("crons", "max_runtime"), ("crons", "quiet"), ("crons", "snooze_until"),
                          ("crons", "hosts"), ("crons", "hosts_mode"),
                          ("running_instances", "host_id"))
TABLES_ADDED_BY_STEPS = ("alert_events", "alert_deliveries", "host_boots", "clock_steps",
                         "service_outages", "hosts", "claims")


def old_select(model):
    """A select of the columns the release before versions had (none that a step added)."""
    added = {c for table, c in COLUMNS_ADDED_BY_STEPS if table == model._meta.table_name}
    return model.select(*[f for f in model._meta.sorted_fields if f.column_name not in added])


def _drop_added_columns(database) -> None:
    for table, column in COLUMNS_ADDED_BY_STEPS:
        database.execute_sql(f'ALTER TABLE "{table}" DROP COLUMN "{column}"')


def release_before_versions(db_url: str):
    """A database at db_url as the last release without a schema version made it: version 1's
    tables, without the indexes later steps added, and no version; bound, connection closed."""
    database = db.make_database(db_url)
    db.bind(database)
    if db.is_sqlite(database):
        os.makedirs(os.path.dirname(database.database), exist_ok=True)
    RunV1._meta.without_rowid = ShadowRun._meta.without_rowid = db.is_sqlite(database)
    with database.connection_context():
        database.create_tables([RunV1 if m is ShadowRun else m for m in ALL_MODELS
                                if m._meta.table_name not in TABLES_ADDED_BY_STEPS])
        for name in ADDED_BY_STEPS:
            database.execute_sql(f'DROP INDEX "{name}"')
        _drop_added_columns(database)
    return database


def database_at(db_url: str, version: int):
    """A database at db_url at schema version `version`: the release before versions
    brought up by the shipped steps 1..version."""
    database = release_before_versions(db_url)
    with database.connection_context():
        for target in range(1, version + 1):
            with database.atomic():
                schema.STEPS[target - 1][1](database)
                runner._stamp(database, target)
        schema.move_old_runs(database)
    return database


def insert_runs(database, rows: list) -> None:
    """Store old_run rows in shadow_runs as the database's version keeps them."""
    if "events" in {c.name for c in database.get_columns("shadow_runs")}:
        RunV1.insert_many(rows).execute()
        return
    slim = [schema._slim(tuple(r[c] for c in schema.MOVE_COLUMNS)) for r in rows]
    ShadowRun.insert_many([dict(zip(schema.MOVED, r, strict=True)) for r in slim]).execute()


def logical_runs(database) -> list:
    """Every Run of a database of any version, as its full logical row, by request id."""
    with database.connection_context():
        if "events" in {c.name for c in database.get_columns("shadow_runs")}:
            rows = list(RunV1.select().dicts())  # version 1 or before: every field stored
        else:
            rows = [logical_row(r) for r in ShadowRun.select().dicts()]
    return sorted(rows, key=lambda r: r["idempotency_key"])


def old_key(seconds: int, n: int) -> str:
    """A valid execution id, distinct for each n."""
    return f"legacy-system:{seconds}:3f2b8c1e-9d4a-4e6b-8f1a-{n:012x}"


def old_run(cron_id: int, seconds: int, n: int, state: str, **columns) -> dict:
    """A stored Run as the writer of version 1 or before left it (the cron must exist)."""
    key = old_key(seconds, n)
    exited = state == "exited"
    row = dict(project_id="default", idempotency_key=key, id=run_id(key, seconds),
               attempt_id=attempt_id(key, seconds), request_id=key,
               task_identity=f"legacy-cron:{cron_id}", cron_id=cron_id,
               task_revision=cron_revision(old_select(Cron).where(Cron.id == cron_id).dicts().get()),
               origin="scheduled_system", trigger_type="scheduled_system",
               triggered_by="legacy:system-crond", execution_owner="legacy",
               accepted_at=seconds, state=state, pid=100 + n, log_path=f"{n}.log",
               started_at=seconds, finished_at=seconds + 5 if exited else None,
               exit_code=0 if exited else None, recorded_at=seconds + 5 if exited else seconds,
               events=f"accepted@{seconds} spawned@{seconds} running@{seconds}"
                      + (f" exited@{seconds + 5}" if exited else ""))
    row.update(columns)
    return row
