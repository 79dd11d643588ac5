"""`qlshadow db init` on a database from before Shadow adds its tables and keeps every row."""
from __future__ import annotations

import os

import pytest

from qlshadow import db
from qlshadow.legacy import apply_status_callback, parse_status_callback
from qlshadow.models import App, Cron, RunningInstance, ShadowFailure, ShadowRun, Token
from qlshadow.shadow import reader
from qlshadow.shadow.writer import observe
from conftest import cli_env, run_cli
from old_schema import RequestKeyedRun, old_key, old_run, request_keyed_database

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


NEW_INDEXES = {"running_instances_cron", "shadow_runs_cron"}


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
    database = request_keyed_database(settings.db_url)
    with database.connection_context():
        for name in NEW_INDEXES | {"shadow_runs_accepted"}:
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
        assert database.get_primary_keys("shadow_runs") == ["accepted_at", "id"]


def run_rows(database) -> list:
    with database.connection_context():
        return sorted(ShadowRun.select().dicts(), key=lambda r: r["idempotency_key"])


@pytest.fixture
def request_keyed(make_settings):
    """A database of the release that keyed Runs by (project_id, idempotency_key)."""
    settings = make_settings()
    database = request_keyed_database(settings.db_url)
    with database.connection_context():
        with database.atomic():
            cron = Cron.insert(name="backup", command="task backup.sh", schedule="*/5 * * * *",
                               created_at=1, updated_at=2).execute()
            # two Runs in the same second (their ids order them), one a second later
            RequestKeyedRun.insert_many([old_run(cron, 1764460800, 1, "exited"),
                                         old_run(cron, 1764460800, 2, "exited"),
                                         old_run(cron, 1764460801, 3, "running")]).execute()
        assert database.get_primary_keys("shadow_runs") == ["project_id", "idempotency_key"]
    yield settings, database, cron
    db.discard_connection()


def test_db_init_rekeys_the_runs_of_an_older_database_and_keeps_every_row(
        request_keyed):
    settings, database, _ = request_keyed
    before = run_rows(database)
    result = run_cli(cli_env(settings), "db", "init")
    assert "re-keyed by (accepted_at, id), 3 Runs kept" in result.stderr
    again = run_cli(cli_env(settings), "db", "init")  # once only
    assert "re-keyed" not in again.stderr
    assert run_rows(database) == before
    with database.connection_context():
        assert database.get_primary_keys("shadow_runs") == ["accepted_at", "id"]
        names = index_names(database)
        assert "shadow_runs_cron" in names and "shadow_runs_accepted" not in names
        # found by the new key, and listed newest first
        assert [reader.get_run(r["id"])["idempotency_key"] for r in before] == [
            r["idempotency_key"] for r in before]
        listed = [r["id"] for r in reader.list_runs(None, None, 10, None)]
    assert listed == sorted((r["id"] for r in before), reverse=True)


def test_runs_kept_by_the_rekey_are_replayed_and_advanced_not_admitted_again(
        request_keyed):
    settings, database, cron = request_keyed
    run_cli(cli_env(settings), "db", "init")
    db.bind(database)
    stored = {r["idempotency_key"]: r for r in run_rows(database)}
    running, exited = stored[old_key(1764460801, 3)], stored[old_key(1764460800, 1)]
    with database.connection_context(), db.write_transaction():
        def send(row, status):
            cb = parse_status_callback({
                "ids": [cron], "status": status, "pid": row["pid"], "log_path": row["log_path"],
                "exit_code": 0, "execution_id": row["idempotency_key"]})
            return observe(cb, apply_status_callback(cb, 1764460900), 1764460900, 10)

        assert send(running, 1) == "advanced"
        assert send(exited, 0) == "replayed"
        assert send(exited, 1) == "replayed"
    after = {r["idempotency_key"]: r for r in run_rows(database)}
    assert set(after) == set(stored)
    assert after[running["idempotency_key"]]["state"] == "exited"
    assert after[exited["idempotency_key"]] == stored[exited["idempotency_key"]]


def test_a_rekey_that_fails_leaves_the_older_database_as_it_was(request_keyed):
    settings, database, cron = request_keyed
    # Two stored Runs that would share one new key: the copy fails half-way on SQLite and
    # the new key cannot be built on PostgreSQL. Nothing of the change may remain.
    with database.connection_context():
        clash = old_run(cron, 1764460800, 1, "exited")
        RequestKeyedRun.insert(clash | {"idempotency_key": clash["idempotency_key"] + "x"}
                               ).execute()
    before = run_rows(database)
    result = run_cli(cli_env(settings), "db", "init", check=False)
    assert result.returncode == 1
    assert "cannot re-key shadow_runs by (accepted_at, id)" in result.stderr
    assert "the database is unchanged" in result.stderr
    assert "Traceback" not in result.stderr
    assert run_rows(database) == before
    with database.connection_context():
        assert database.get_primary_keys("shadow_runs") == ["project_id", "idempotency_key"]
        assert "shadow_runs_accepted" in index_names(database)
        assert not database.table_exists("shadow_runs_old")
