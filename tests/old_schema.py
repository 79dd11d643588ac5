"""shadow_runs as older releases made it, with Runs as their writer left them.

For the tests of the one-time re-key by (accepted_at, id) (db.create_schema).
"""
from __future__ import annotations

import os

from peewee import CompositeKey

from qlshadow import db
from qlshadow.models import App, Cron, RunningInstance, ShadowFailure, ShadowRun, Token
from qlshadow.shadow.ids import attempt_id, run_id
from qlshadow.shadow.writer import cron_revision


class RequestKeyedRun(ShadowRun):
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
    return database


def old_key(seconds: int, n: int) -> str:
    """A valid execution id, distinct for each n."""
    return f"legacy-system:{seconds}:3f2b8c1e-9d4a-4e6b-8f1a-{n:012x}"


def old_run(cron_id: int, seconds: int, n: int, state: str, **columns) -> dict:
    """A stored Run as the writer of an older release left it (the cron must exist)."""
    key = old_key(seconds, n)
    exited = state == "exited"
    row = dict(project_id="default", idempotency_key=key, id=run_id(key, seconds),
               attempt_id=attempt_id(key, seconds), request_id=key,
               task_identity=f"legacy-cron:{cron_id}", cron_id=cron_id,
               task_revision=cron_revision(Cron.select().where(Cron.id == cron_id).dicts().get()),
               origin="scheduled_system", trigger_type="scheduled_system",
               triggered_by="legacy:system-crond", execution_owner="legacy",
               accepted_at=seconds, state=state, pid=100 + n, log_path=f"{n}.log",
               started_at=seconds, finished_at=seconds + 5 if exited else None,
               exit_code=0 if exited else None, recorded_at=seconds + 5,
               events=f"accepted@{seconds} spawned@{seconds} running@{seconds}"
                      + (f" exited@{seconds + 5}" if exited else ""))
    row.update(columns)
    return row
