"""`qlshadow db init` on a database from before Shadow adds its tables and keeps every row."""
from __future__ import annotations

import os

import pytest

from qlshadow import db
from qlshadow.legacy import apply_status_callback, parse_status_callback
from qlshadow.models import App, Cron, RunningInstance, ShadowFailure, ShadowRun, Token
from qlshadow.shadow.writer import observe
from conftest import cli_env, run_cli

OLD_MODELS = (Cron, RunningInstance, App, Token)


def snapshot() -> dict:
    return {model._meta.table_name: list(model.select().dicts()) for model in OLD_MODELS}


@pytest.fixture
def old_database(make_settings):
    """A database holding only the tables of the previous release, with rows in each."""
    settings = make_settings()
    database = db.make_database(settings.db_url)
    db.bind(database)
    if db.is_sqlite(database):
        os.makedirs(os.path.dirname(database.database), exist_ok=True)
    with database.connection_context():
        database.create_tables(OLD_MODELS)
        database.execute_sql("DROP INDEX running_instances_cron")  # added by this release
        with database.atomic():
            cron = Cron.insert(name="backup", command="task backup.sh", schedule="*/5 * * * *",
                               status=0, pid=42, log_path="b.log", created_at=1, updated_at=2
                               ).execute()
            Cron.insert(name="old", command="x", schedule="@once", created_at=3,
                        updated_at=4, is_disabled=1).execute()
            RunningInstance.insert(cron=cron, pid=42, log_path="b.log", started_at=10).execute()
            app_id = App.insert(name="legacy-client", client_id="c1", client_secret_hash="0" * 64,
                                scopes="crons", created_at=5).execute()
            Token.insert(token_hash="1" * 64, app=app_id, expiration=2**40).execute()
        before = snapshot()
        assert not database.table_exists("shadow_runs")
    yield settings, database, before
    db.discard_connection()


def test_db_init_adds_the_shadow_tables_and_keeps_every_row(old_database):
    settings, database, before = old_database
    run_cli(cli_env(settings), "db", "init")
    with database.connection_context():
        assert database.table_exists("shadow_runs")
        assert database.table_exists("shadow_failures")
        after = snapshot()
        assert ShadowRun.select().count() == ShadowFailure.select().count() == 0
    # db init adds the system app after the old one, and changes nothing else
    assert after["apps"][:1] == before["apps"]
    assert [a["name"] for a in after["apps"]] == ["legacy-client", "system"]
    assert after["crons"] == before["crons"]
    assert after["running_instances"] == before["running_instances"]
    assert after["tokens"] == before["tokens"]


def test_the_upgraded_database_admits_runs(old_database):
    settings, database, _ = old_database
    env = cli_env(settings)
    run_cli(env, "db", "init")
    run_cli(env, "db", "init")  # twice is harmless
    with database.connection_context(), db.write_transaction():
        cb = parse_status_callback({
            "ids": [1], "status": 1, "pid": 42, "log_path": "b.log", "exit_code": 0,
            "execution_id": "legacy-system:1764460800:3f2b8c1e-9d4a-4e6b-8f1a-2c3d4e5f6a7b"})
        assert observe(cb, apply_status_callback(cb, 1764460900), 1764460900, 10) == "created"
    with database.connection_context():
        assert [r["state"] for r in ShadowRun.select().dicts()] == ["exited"]


@pytest.mark.parametrize("backend", ["sqlite"])
def test_on_sqlite_the_added_run_table_is_without_rowid(old_database):
    settings, database, _ = old_database
    run_cli(cli_env(settings), "db", "init")
    with database.connection_context():
        sql = database.execute_sql(
            "SELECT sql FROM sqlite_master WHERE name = 'shadow_runs'").fetchone()[0]
    assert sql.rstrip().upper().endswith("WITHOUT ROWID")


NEW_INDEXES = {"running_instances_cron", "shadow_runs_accepted", "shadow_runs_cron"}


def index_names(database) -> set:
    if db.is_sqlite(database):
        sql = "SELECT name FROM sqlite_master WHERE type = 'index'"
    else:
        sql = "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
    return {row[0] for row in database.execute_sql(sql).fetchall()}


@pytest.fixture
def database_without_indexes(make_settings):
    """A database of the release before the read indexes, holding Runs and instances."""
    settings = make_settings()
    database = db.make_database(settings.db_url)
    db.bind(database)
    if db.is_sqlite(database):
        os.makedirs(os.path.dirname(database.database), exist_ok=True)
    ShadowRun._meta.without_rowid = db.is_sqlite(database)
    with database.connection_context():
        database.create_tables(OLD_MODELS + (ShadowRun, ShadowFailure))
        for name in NEW_INDEXES:
            database.execute_sql(f"DROP INDEX {name}")
        with database.atomic():
            cron = Cron.insert(name="backup", command="task backup.sh", schedule="*/5 * * * *",
                               created_at=1, updated_at=2).execute()
            RunningInstance.insert(cron=cron, pid=42, log_path="b.log", started_at=10).execute()
        rows = {m._meta.table_name: list(m.select().dicts()) for m in (Cron, RunningInstance)}
        assert not NEW_INDEXES & index_names(database)
    yield settings, database, rows
    db.discard_connection()


def test_start_up_adds_the_read_indexes_to_an_existing_database_and_keeps_its_rows(
        database_without_indexes):
    settings, database, rows = database_without_indexes
    run_cli(cli_env(settings), "db", "init")
    with database.connection_context():
        assert NEW_INDEXES <= index_names(database)
        assert {m._meta.table_name: list(m.select().dicts())
                for m in (Cron, RunningInstance)} == rows
