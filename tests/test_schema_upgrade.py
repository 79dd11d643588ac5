"""The versioned schema (app/storage/schema/): every step from a database of the release before
it, on SQLite and PostgreSQL, with its rows kept; a fresh database stamped at the latest
version; start-up a no-op when current; a newer version refused; concurrent start-ups;
a failed step leaving the database at the version before it."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from peewee import TextField

from qlshadow.storage import db, schema
from qlshadow.storage.schema import runner
from qlshadow.core.legacy import apply_status_callback, parse_status_callback
from qlshadow.storage.models import (ALL_MODELS, App, Cron, RunningInstance, ShadowFailure, ShadowRun,
                                     Token)
from qlshadow.core.shadow import reader
from qlshadow.core.shadow.writer import observe
from helpers import ROOT, cli_env, run_cli
from old_schema import (RequestKeyedRun, database_at, insert_runs, logical_runs, old_key, old_run,
                        old_select, release_before_versions, request_keyed_database)

OLD_MODELS = (Cron, RunningInstance, App, Token)


def stored_version(database) -> int | None:
    """The schema version the database holds; None when it holds none."""
    with database.connection_context():
        if not database.table_exists(schema.VERSION_TABLE):
            return None
        return database.execute_sql('SELECT "version" FROM "schema_version"').fetchone()[0]


def snapshot() -> dict:
    return {model._meta.table_name: list(old_select(model).dicts()) for model in OLD_MODELS}


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
    assert stored_version(database) == schema.LATEST


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
        assert [reader.logical_row(r)["state"] for r in ShadowRun.select().dicts()] == ["exited"]


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
        rows = {m._meta.table_name: list(old_select(m).dicts()) for m in (Cron, RunningInstance)}
        assert not NEW_INDEXES & index_names(database)
    yield settings, database, rows
    db.discard_connection()


def test_start_up_adds_the_read_indexes_to_an_existing_database_and_keeps_its_rows(
        database_without_indexes):
    settings, database, rows = database_without_indexes
    run_cli(cli_env(settings), "db", "init")
    with database.connection_context():
        assert NEW_INDEXES <= index_names(database)
        assert {m._meta.table_name: list(old_select(m).dicts())
                for m in (Cron, RunningInstance)} == rows
        assert database.get_primary_keys("shadow_runs") == ["accepted_at", "id"]


def run_rows(database) -> list:
    return logical_runs(database)


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
    assert stored_version(database) is None  # still the release before versions
    with database.connection_context():
        assert database.get_primary_keys("shadow_runs") == ["project_id", "idempotency_key"]
        assert "shadow_runs_accepted" in index_names(database)
        assert not database.table_exists("shadow_runs_old")


# --- the version and the steps -----------------------------------------------------------------

def catalog(database) -> dict:
    """Every table with its columns, key, indexes and foreign keys, as the database reports them."""
    with database.connection_context():
        return {table: {"columns": [(c.name, c.data_type.lower(), c.null, c.primary_key)
                                    for c in database.get_columns(table)],
                        "key": database.get_primary_keys(table),
                        "indexes": sorted((i.name, i.sql, tuple(i.columns), i.unique)
                                          for i in database.get_indexes(table)),
                        "foreign_keys": sorted((f.column, f.dest_table, f.dest_column)
                                               for f in database.get_foreign_keys(table))}
                for table in database.get_tables()}


@pytest.fixture
def fresh_catalog(backend, tmp_path, pg_databases) -> dict:
    """The catalog of a database that start-up created from nothing (another database)."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path}/fresh/qlshadow.db"
    else:
        url = pg_databases.fresh("fresh-schema")
    bound = db.database.obj
    database = db.make_database(url)
    db.bind(database)
    if db.is_sqlite(database):
        os.makedirs(os.path.dirname(database.database))
    schema.upgrade_schema()
    assert stored_version(database) == schema.LATEST
    found = catalog(database)
    if bound is not None:  # the test's own database, bound by a fixture before this one
        db.bind(bound)
    return found


def fill_every_table(database) -> dict:
    """One or more rows in every table; returns them as read back, table by table."""
    with database.connection_context(), database.atomic():
        cron = Cron.insert(name="backup", command="task backup.sh", schedule="*/5 * * * *",
                           status=0, pid=42, log_path="b.log", created_at=1, updated_at=2
                           ).execute()
        RunningInstance.insert(cron=cron, pid=42, log_path="b.log", started_at=10).execute()
        app_id = App.insert(name="legacy-client", client_id="c1", client_secret_hash="0" * 64,
                            scopes="crons", created_at=5).execute()
        Token.insert(token_hash="1" * 64, app=app_id, expiration=2**40).execute()
        insert_runs(database, [old_run(cron, 1764460800, 1, "exited"),
                               old_run(cron, 1764460860, 2, "running")])
        ShadowFailure.insert(at=1764460900, reason="drift", cron_id=cron, detail="x").execute()
    return every_row(database)


def every_row(database) -> dict:
    with database.connection_context():
        # The columns every version has: a step's new column is checked by the catalog.
        rows = {m._meta.table_name: sorted(old_select(m).tuples()) for m in
                (Cron, RunningInstance, App, Token, ShadowFailure)}
    rows["shadow_runs"] = logical_runs(database)
    return rows


@pytest.mark.parametrize("version", range(schema.LATEST))
def test_each_step_upgrades_a_database_of_the_version_before_and_keeps_its_rows(
        make_settings, fresh_catalog, version):
    settings = make_settings()
    database = database_at(settings.db_url, version)
    before = fill_every_table(database)
    assert stored_version(database) == (version or None)

    run_cli(cli_env(settings), "db", "init")

    assert stored_version(database) == schema.LATEST
    assert catalog(database) == fresh_catalog
    after = every_row(database)
    assert after.pop("apps")[:1] == before.pop("apps")  # db init adds the system app
    assert after == before


def test_the_release_before_versions_is_recognised_without_a_version(make_settings):
    settings = make_settings()
    database = release_before_versions(settings.db_url)
    with database.connection_context():
        assert not database.table_exists(schema.VERSION_TABLE)
        assert runner._current(database) == 0


def test_a_fresh_database_is_created_at_the_latest_version(make_settings):
    settings = make_settings()
    database, _ = db.open_database(settings)
    assert stored_version(database) == schema.LATEST
    with database.connection_context():
        tables = set(database.get_tables()) - {"sqlite_sequence"}  # SQLite's AUTOINCREMENT
        assert tables == {m._meta.table_name for m in ALL_MODELS} | {schema.VERSION_TABLE}
        # one row: the version is a single fact
        assert database.execute_sql('SELECT COUNT(*) FROM "schema_version"').fetchone()[0] == 1


def test_start_up_on_a_current_database_changes_nothing_and_takes_no_lock(make_settings):
    settings = make_settings()
    database = database_at(settings.db_url, 0)
    fill_every_table(database)
    run_cli(cli_env(settings), "db", "init")
    before, rows = catalog(database), every_row(database)
    # Another connection holds the write lock (SQLite) or the schema lock (PostgreSQL): a
    # start-up that wrote or locked anything would wait for it and then fail.
    other = db.make_database(settings.db_url, timeout=1)
    with other.connection_context():
        if db.is_sqlite(other):
            other.execute_sql("BEGIN IMMEDIATE")
        else:
            other.execute_sql("BEGIN")
            other.execute_sql("SELECT pg_advisory_xact_lock(%s)", (schema.PG_LOCK_KEY,))
        try:
            db.bind(database)
            mode = schema.upgrade_schema()
        finally:
            other.execute_sql("ROLLBACK")
    assert mode == ("wal" if db.is_sqlite(database) else "")
    assert catalog(database) == before
    assert every_row(database) == rows
    assert stored_version(database) == schema.LATEST


def set_version(database, version: int) -> None:
    with database.connection_context():
        database.execute_sql(f'UPDATE "schema_version" SET "version" = {version}')


def test_a_database_newer_than_the_code_is_refused_with_one_line(make_settings):
    settings = make_settings()
    database = database_at(settings.db_url, schema.LATEST)
    fill_every_table(database)
    set_version(database, schema.LATEST + 1)
    before, rows = catalog(database), every_row(database)
    for command in (("db", "init"), ("runs",)):  # the start-up, and a read-only command
        result = run_cli(cli_env(settings), *command, check=False)
        assert result.returncode == 1
        assert result.stderr.strip().splitlines() == [(
            f"qlshadow: the database's schema is version {schema.LATEST + 1}, newer than this "
            f"qlshadow's {schema.LATEST}: run the release that wrote it, or a later one")]
    assert stored_version(database) == schema.LATEST + 1
    assert catalog(database) == before and every_row(database) == rows


def test_the_server_refuses_to_start_on_a_newer_database(make_settings):
    from qlshadow.web.views import create_app
    settings = make_settings()
    database = database_at(settings.db_url, schema.LATEST)
    set_version(database, schema.LATEST + 1)
    with pytest.raises(schema.SchemaError, match="newer than this qlshadow's"):
        create_app(settings)


def failing_step(database) -> None:
    """A step that changes something and then fails, as a full disk would half-way."""
    database.execute_sql('CREATE TABLE "half_done" ("x" INTEGER)')
    database.execute_sql('INSERT INTO "no_such_table" VALUES (1)')


def test_a_failed_step_leaves_the_database_at_the_version_before_it(make_settings, monkeypatch):
    settings = make_settings()
    database = database_at(settings.db_url, schema.LATEST)
    rows = fill_every_table(database)
    before = catalog(database)
    monkeypatch.setattr(runner, "STEPS", runner.STEPS + (("add a half-done table", failing_step),))
    monkeypatch.setattr(runner, "LATEST", runner.LATEST + 1)
    db.bind(database)

    with pytest.raises(runner.SchemaError) as raised:
        runner.upgrade_schema()

    assert str(raised.value).startswith("cannot add a half-done table: ")
    assert str(raised.value).endswith("; the database is unchanged")
    assert "\n" not in str(raised.value)
    assert stored_version(database) == runner.LATEST - 1
    assert catalog(database) == before and every_row(database) == rows


def test_steps_that_succeed_before_a_failed_one_stay_done(make_settings, monkeypatch):
    settings = make_settings()
    database = database_at(settings.db_url, schema.LATEST)
    before = catalog(database)

    def add_a_table(database):
        database.execute_sql('CREATE TABLE "added" ("x" INTEGER)')

    monkeypatch.setattr(runner, "STEPS", runner.STEPS + (("add a table", add_a_table),
                                                         ("add a half-done table", failing_step)))
    monkeypatch.setattr(runner, "LATEST", runner.LATEST + 2)
    db.bind(database)

    with pytest.raises(runner.SchemaError) as raised:
        runner.upgrade_schema()

    assert str(raised.value).endswith(
        f"; the database stays at schema version {runner.LATEST - 1}")
    assert stored_version(database) == runner.LATEST - 1
    after = catalog(database)
    assert set(after) - set(before) == {"added"}


# The start-up's schema part (db.open_database), as `serve` and every command run it.
START_WHEN_TOLD = """
import os, sys, time
from qlshadow import config
from qlshadow.storage import db
settings = config.load()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
db.open_database(settings)
"""


def start_at_once(settings, tmp_path, processes: int = 4) -> list:
    """Open the database for writing in several processes released at the same moment."""
    go = tmp_path / "go"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
    env.update(cli_env(settings))
    started = [subprocess.Popen([sys.executable, "-c", START_WHEN_TOLD, str(go)], cwd=ROOT,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for _ in range(processes)]
    go.write_text("")
    results = []
    for process in started:
        out, err = process.communicate(timeout=120)
        results.append((process.returncode, out, err))
    return results


def test_processes_starting_at_once_on_a_fresh_database_make_one_schema(
        make_settings, fresh_catalog, tmp_path):
    settings = make_settings()
    os.makedirs(settings.data_dir, exist_ok=True)

    results = start_at_once(settings, tmp_path)

    assert [(code, err) for code, _, err in results] == [(0, "")] * len(results)
    database = db.make_database(settings.db_url)
    assert stored_version(database) == schema.LATEST
    assert catalog(database) == fresh_catalog


def test_processes_starting_at_once_on_an_older_database_upgrade_it_once(
        request_keyed, fresh_catalog, tmp_path):
    settings, database, _ = request_keyed
    before = run_rows(database)

    results = start_at_once(settings, tmp_path)

    assert [code for code, _, _ in results] == [0] * len(results), results
    logs = "".join(err for _, _, err in results)
    assert logs.count("re-keyed by (accepted_at, id), 3 Runs kept") == 1
    assert stored_version(database) == schema.LATEST
    assert catalog(database) == fresh_catalog
    assert run_rows(database) == before


class FailureWithNote(ShadowFailure):
    """shadow_failures as a later release might change it: one more column, one index."""
    note = TextField(null=True)

    class Meta:
        table_name = "shadow_failures"


FailureWithNote.add_index(FailureWithNote.index(FailureWithNote.cron_id, FailureWithNote.at,
                                                name="shadow_failures_cron"))


def add_a_note(database) -> None:
    schema.add_column(database, FailureWithNote, "note")
    schema.add_indexes(FailureWithNote)


def test_a_step_written_with_the_helpers_adds_a_column_and_an_index_and_keeps_the_rows(
        make_settings, monkeypatch):
    settings = make_settings()
    database = database_at(settings.db_url, schema.LATEST)
    rows = fill_every_table(database)
    monkeypatch.setattr(runner, "STEPS", runner.STEPS + (("add a note to failures", add_a_note),))
    monkeypatch.setattr(runner, "LATEST", runner.LATEST + 1)
    db.bind(database)

    runner.upgrade_schema()
    runner.upgrade_schema()  # once only

    assert stored_version(database) == runner.LATEST
    with database.connection_context():
        assert "note" in {c.name for c in database.get_columns("shadow_failures")}
        assert "shadow_failures_cron" in index_names(database)
        assert [r["note"] for r in FailureWithNote.select().dicts()] == [None]
    assert every_row(database) == rows


def test_step_4_gives_a_version_3_database_the_alert_tables_and_its_crons_no_alert_state(
        make_settings):
    from qlshadow.storage.models import AlertEvent
    settings = make_settings()
    database = database_at(settings.db_url, 3)
    fill_every_table(database)
    with database.connection_context():
        assert not database.table_exists("alert_events")
        assert "alert_state" not in {c.name for c in database.get_columns("crons")}

    run_cli(cli_env(settings), "db", "init")

    db.bind(database)
    with database.connection_context():
        assert [c["alert_state"] for c in Cron.select().dicts()] == [None]
        with db.write_transaction():
            cb = parse_status_callback({"ids": [1], "status": 1, "pid": 42, "exit_code": 2})
            apply_status_callback(cb, 1764460900)
        assert [(e.state, e.previous) for e in AlertEvent.select()] == [("failed", None)]


def test_a_process_that_finds_the_move_ended_by_another_stops_quietly(
        request_keyed, tmp_path, caplog, monkeypatch):
    settings, database, _ = request_keyed
    results = start_at_once(settings, tmp_path, processes=1)  # it moves every Run
    assert [code for code, _, _ in results] == [0]
    # This process looked a moment earlier, while the old table was still there.
    real = database.table_exists
    looked: list = []

    def seen_before_the_end(name, *args, **kwargs):
        looked.append(name)
        return True if len(looked) == 1 else real(name, *args, **kwargs)

    monkeypatch.setattr(database, "table_exists", seen_before_the_end)
    with database.connection_context():
        assert schema.move_old_runs(database) == 0
        assert database.execute_sql("SELECT COUNT(*) FROM shadow_runs").fetchone()[0] == 3
    assert "stopped" not in caplog.text


FLEET_STEP = [name for name, _ in schema.STEPS].index("add hosts and the crons' host fields")


def test_crons_from_before_the_fleet_keep_running_on_every_host_and_the_upgrade_says_so_once(
        make_settings):
    from qlshadow.host import crontab
    settings = make_settings(QL_HOST_NAME="router", QL_SCHEDULER="system")
    database = database_at(settings.db_url, FLEET_STEP)
    with database.connection_context():
        for name in ("backup", "sync"):
            database.execute_sql(
                'INSERT INTO "crons" ("name", "command", "schedule", "allow_multiple_instances", '
                '"status", "is_disabled", "created_at", "updated_at") VALUES '
                f"('{name}', 'echo {name}', '* * * * *', 0, 1, 0, 1, 1)")
    first = run_cli(cli_env(settings), "db", "init")
    again = run_cli(cli_env(settings), "db", "init")
    assert "2 cron(s) from before hosts were named run on every host" in first.stderr
    assert "every host" not in again.stderr
    with database.connection_context():
        rows = list(Cron.select().order_by(Cron.id).dicts())
    assert [(r["hosts"], r["hosts_mode"]) for r in rows] == [('["*"]', None)] * 2
    for host in ("router", "nas", "pi"):  # each host's block still runs both
        text, active = crontab.render_rows(make_settings(QL_HOST_NAME=host,
                                                         QL_SCHEDULER="system"), rows)
        assert active == 2 and "echo backup" in text and "echo sync" in text
