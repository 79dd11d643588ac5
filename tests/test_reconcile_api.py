"""GET /open/reconcile and `qlshadow reconcile`: the document's shape, the `runs` scope,
bad input, the exit codes, and that the command only reads."""
from __future__ import annotations

import json
import sqlite3
import time

import pytest

from qlshadow.storage import db
from qlshadow.core.auth import create_app_record
from helpers import cli_env, run_cli
from reconcile_history import HOUR, fire, history, new_cron

CRON_KEYS = {"cron_id", "name", "schedule", "expected", "runs", "exited", "running", "failed",
             "finish_only", "stuck", "missed", "double", "unmatched_instances", "drift",
             "invalid", "verdict", "reasons"}


# Histories below are laid out in UTC minutes (a test may set its own zone inside).
pytestmark = [pytest.mark.shadow_on, pytest.mark.usefixtures("utc_box")]


@pytest.fixture
def past():
    """(since, until): the last six whole hours that ended at least an hour ago."""
    until = int(time.time()) // HOUR * HOUR - HOUR
    return until - 6 * HOUR, until


def token_with(client, scopes: list) -> dict:
    with db.database.connection_context(), db.write_transaction():
        client_id, secret = create_app_record("-".join(scopes) + "-only", scopes)
    got = client.get(f"/open/auth/token?client_id={client_id}&client_secret={secret}")
    return {"Authorization": f"Bearer {got.get_json()['data']['token']}"}


def test_the_endpoint_answers_the_documented_fields(client, auth, past):
    since, until = past
    cron_id = new_cron(client, auth, "*/30 * * * *", since - HOUR)
    history(client, auth, cron_id, range(since, until, 1800))
    response = client.get(f"/open/reconcile?since={since}&until={until}", headers=auth)
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert body["code"] == 200
    data = body["data"]
    assert data["window"] == {"since": since, "until": until}
    assert {"verdict", "reasons"} <= data["gate"].keys()
    (report,) = data["crons"]
    assert CRON_KEYS <= report.keys()
    assert (report["cron_id"], report["expected"], report["runs"]) == (cron_id, 12, 12)


def test_the_endpoint_filters_by_cron_id(client, auth, past):
    since, until = past
    first = new_cron(client, auth, "*/30 * * * *", since - HOUR, name="a")
    second = new_cron(client, auth, "*/30 * * * *", since - HOUR, name="b")
    response = client.get(f"/open/reconcile?since={since}&until={until}&cron_id={second}",
                          headers=auth)
    assert [r["cron_id"] for r in response.get_json()["data"]["crons"]] == [second]
    assert first != second


def test_stuck_after_is_taken_from_the_query(client, auth, past):
    since, until = past
    cron_id = new_cron(client, auth, "*/30 * * * *", since - HOUR)
    history(client, auth, cron_id, range(since, until - 1800, 1800))
    fire(client, auth, cron_id, until - 1800, finish=False)
    age = int(time.time()) - (until - 1800)
    loose = client.get(f"/open/reconcile?since={since}&until={until}&stuck_after={age + 600}",
                       headers=auth).get_json()["data"]["crons"][0]
    tight = client.get(f"/open/reconcile?since={since}&until={until}&stuck_after={age - 600}",
                       headers=auth).get_json()["data"]["crons"][0]
    assert (loose["stuck"], tight["stuck"]) == (0, 1)


def test_the_endpoint_needs_the_runs_scope(client, auth):
    crons_only = token_with(client, ["crons"])
    runs_only = token_with(client, ["runs"])
    assert client.get("/open/reconcile", headers=crons_only).status_code == 403
    assert client.get("/open/reconcile").status_code == 401
    assert client.get("/open/reconcile", headers=runs_only).status_code == 200


@pytest.mark.parametrize("query, field", [
    ("since=100&until=100", "until"),
    ("since=abc", "since"),
    ("until=-5", "until"),
    ("since=0&until=99999999", "since"),
    ("cron_id=0", "cron_id"),
    ("cron_id=424242", "cron_id"),
    ("stuck_after=1.5", "stuck_after"),
])
def test_bad_query_parameters_are_a_400_naming_the_field(client, auth, query, field):
    response = client.get(f"/open/reconcile?{query}", headers=auth)
    assert response.status_code == 400
    assert f"'{field}'" in response.get_json()["message"]


# --- the command ---------------------------------------------------------------------------

def _run(app, *args):
    return run_cli({**cli_env(app.extensions["qlshadow"]), "TZ": "UTC"}, "reconcile", *args,
                   check=False)


def test_the_command_exits_0_when_the_gate_passes(app, client, auth, past):
    since, until = past
    cron_id = new_cron(client, auth, "*/30 * * * *", since - HOUR)
    history(client, auth, cron_id, range(since, until, 1800))
    result = _run(app, "--since", str(since), "--until", str(until), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["data"]["gate"]["verdict"] == "pass"


def test_the_command_exits_1_when_the_gate_fails(app, client, auth, past):
    since, until = past
    cron_id = new_cron(client, auth, "*/30 * * * *", since - HOUR)
    history(client, auth, cron_id, range(since, until, 1800), skip={since + 1800})
    result = _run(app, "--since", str(since), "--until", str(until))
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines()[0].endswith(": FAIL")
    assert "neither a Run nor a Legacy instance" in result.stdout


def test_the_command_exits_3_when_there_is_too_little_data(app, client, auth, past):
    since, until = past
    new_cron(client, auth, "0 0 1 1 *", since - HOUR)
    result = _run(app, "--since", str(since), "--until", str(until), "--json")
    assert result.returncode == 3, result.stderr
    assert json.loads(result.stdout)["data"]["gate"]["verdict"] == "insufficient"


def test_the_command_reads_one_cron_with_cron(app, client, auth, past):
    since, until = past
    new_cron(client, auth, "*/30 * * * *", since - HOUR, name="a")
    second = new_cron(client, auth, "*/30 * * * *", since - HOUR, name="b")
    result = _run(app, "--since", str(since), "--until", str(until), "--cron", str(second),
                  "--json")
    assert [r["cron_id"] for r in json.loads(result.stdout)["data"]["crons"]] == [second]


def test_the_command_names_a_bad_window_on_stderr(app):
    result = _run(app, "--since", "200", "--until", "100")
    assert result.returncode == 2
    assert result.stderr.strip() == "qlshadow: 'until' must be later than 'since'."


def test_the_command_does_not_create_a_missing_sqlite_database(tmp_path):
    path = tmp_path / "absent.db"
    result = run_cli({"QL_DATA_DIR": str(tmp_path), "QL_DB_URL": f"sqlite:///{path}"},
                     "reconcile", check=False)
    assert result.returncode == 1 and "no database" in result.stderr
    assert not path.exists()


def test_the_command_does_not_create_missing_tables(tmp_path):
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    result = run_cli({"QL_DATA_DIR": str(tmp_path), "QL_DB_URL": f"sqlite:///{path}"},
                     "reconcile", check=False)
    assert result.returncode == 1 and "database error" in result.stderr
    tables = sqlite3.connect(path).execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == []


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_command_answers_while_another_process_holds_the_write_lock(app, client, auth, past):
    since, until = past
    cron_id = new_cron(client, auth, "*/30 * * * *", since - HOUR)
    history(client, auth, cron_id, range(since, until, 1800))
    settings = app.extensions["qlshadow"]
    writer = sqlite3.connect(settings.db_url[len("sqlite:///"):], isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        # Waiting for the lock would end in "database is locked" after the busy timeout.
        result = _run(app, "--since", str(since), "--until", str(until), "--json")
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["data"]["crons"][0]["runs"] == 12
