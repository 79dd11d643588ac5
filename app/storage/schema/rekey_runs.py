"""Step 1 (version 0 to 1): the schema of the last release without a version, from any
older one, shadow_runs re-keyed by (accepted_at, id). Its Run table is the frozen RunV1,
shadow_runs as version 1 had it; the other tables come from today's models."""
from __future__ import annotations

from peewee import (BigIntegerField, CompositeKey, Database, IntegerField, SqliteDatabase,
                    TextField)

from qlshadow.storage.models import (App, BaseModel, Cron, RunningInstance, ShadowFailure,
                                     ShadowRun, Token)
from qlshadow.storage.peewee_compat import set_without_rowid
from qlshadow.storage.schema.helpers import add_indexes, add_table

# --- frozen tables: a table as a shipped version had it, for the steps that build it --------

class RunV1(BaseModel):
    """shadow_runs at version 1: every field of the Run stored, as text."""
    project_id = TextField()
    idempotency_key = TextField()
    id = TextField()
    attempt_id = TextField()
    request_id = TextField()
    task_identity = TextField()
    cron_id = BigIntegerField()
    task_revision = TextField()
    origin = TextField()
    trigger_type = TextField()
    triggered_by = TextField()
    execution_owner = TextField()
    accepted_at = BigIntegerField()
    state = TextField()
    pid = BigIntegerField(null=True)
    log_path = TextField(null=True)
    started_at = BigIntegerField(null=True)
    finished_at = BigIntegerField(null=True)
    exit_code = IntegerField(null=True)
    events = TextField()
    recorded_at = BigIntegerField()

    class Meta:
        table_name = "shadow_runs"
        primary_key = CompositeKey("accepted_at", "id")


RunV1.add_index(RunV1.index(RunV1.cron_id, RunV1.accepted_at, RunV1.id, name="shadow_runs_cron"))

# The tables of version 1: later steps add theirs.
V1_MODELS = (Cron, RunningInstance, App, Token, ShadowRun, ShadowFailure)


def step_release_before_versions(db: Database) -> str | None:
    """Version 1: the schema of the last release without a version, from any older one."""
    done = None
    if db.table_exists("shadow_runs") and \
            db.get_primary_keys("shadow_runs") == ["project_id", "idempotency_key"]:
        done = _rekey_runs(db)
    set_without_rowid(RunV1, isinstance(db, SqliteDatabase))
    for model in V1_MODELS:
        add_table(db, RunV1 if model is ShadowRun else model)
    add_indexes(RunningInstance)
    add_indexes(RunV1)
    return done


def _rekey_runs(db: Database) -> str:
    """Re-key an older shadow_runs by (accepted_at, id), keeping every row.

    Older databases keyed it by (project_id, idempotency_key), with an (accepted_at, id)
    index for the order that is now the key itself (models.ShadowRun).
    """
    if isinstance(db, SqliteDatabase):
        # SQLite cannot change a table's key: the rows are copied into a new table, which
        # needs as much free space again as the table while it runs.
        columns = ", ".join(f'"{f.column_name}"' for f in RunV1._meta.sorted_fields)
        db.execute_sql('ALTER TABLE "shadow_runs" RENAME TO "shadow_runs_old"')
        for index in db.get_indexes("shadow_runs_old"):  # they moved with the table
            if index.sql:  # not a key's own index, which goes with the table
                db.execute_sql(f'DROP INDEX "{index.name}"')
        set_without_rowid(RunV1, True)
        db.create_tables([RunV1])
        db.execute_sql(f'INSERT INTO "shadow_runs" ({columns}) '
                       f'SELECT {columns} FROM "shadow_runs_old"')
        db.execute_sql('DROP TABLE "shadow_runs_old"')
    else:
        db.execute_sql('ALTER TABLE "shadow_runs" DROP CONSTRAINT "shadow_runs_pkey", '
                       'ADD PRIMARY KEY ("accepted_at", "id")')
        db.execute_sql('DROP INDEX IF EXISTS "shadow_runs_accepted"')
    rows = db.execute_sql('SELECT COUNT(*) FROM "shadow_runs"').fetchone()[0]
    return f"shadow_runs re-keyed by (accepted_at, id), {rows} Runs kept"
