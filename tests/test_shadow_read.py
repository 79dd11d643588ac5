"""Reading Shadow: GET /open/runs (filters, paging), /open/runs/<id>, /open/runs/failures,
the `runs` scope, and `qlshadow runs` / `qlshadow accept-failures`."""
from __future__ import annotations

import json

import pytest

from qlshadow.storage import db
from qlshadow.core.auth import create_app_record
from helpers import SHADOW_ON, STATUS_PATH, run_cli

pytestmark = pytest.mark.shadow_on

UUID = "3f2b8c1e-9d4a-4e6b-8f1a-2c3d4e5f6a7b"


def execution_id(seconds: int, n: int = 0) -> str:
    return f"legacy-system:{seconds}:{n:08x}-9d4a-4e6b-8f1a-2c3d4e5f6a7b"


def send(client, auth, cron_id: int, eid, status: int = 1, exit_code: int = 0):
    body = {"ids": [cron_id], "status": status, "pid": 1, "log_path": "a.log",
            "last_execution_time": 1700000000, "exit_code": exit_code, "execution_id": eid}
    assert client.put(STATUS_PATH, json=body, headers=auth).status_code == 200


def runs(client, auth, query: str = "") -> list:
    response = client.get(f"/open/runs{query}", headers=auth)
    assert response.status_code == 200, response.get_json()
    return response.get_json()["data"]


@pytest.fixture
def three_crons(client, auth, make_cron):
    """Crons a, b, c; a has 3 exited runs, b 2 running runs, c none; returns the cron ids."""
    a, b, c = (make_cron(name=n)["id"] for n in "abc")
    for n, seconds in enumerate((1700000100, 1700000300, 1700000200)):
        send(client, auth, a, execution_id(seconds, n))
    for n, seconds in enumerate((1700000150, 1700000250)):
        send(client, auth, b, execution_id(seconds, 10 + n), status=0)
    return a, b, c


def test_runs_are_listed_newest_first_by_run_id(client, auth, three_crons):
    listed = runs(client, auth)
    assert [r["accepted_at"] for r in listed] == [
        1700000300, 1700000250, 1700000200, 1700000150, 1700000100]
    assert [r["id"] for r in listed] == sorted((r["id"] for r in listed), reverse=True)


def test_runs_are_filtered_by_cron_id(client, auth, three_crons):
    a, b, c = three_crons
    assert {r["cron_id"] for r in runs(client, auth, f"?cron_id={b}")} == {b}
    assert len(runs(client, auth, f"?cron_id={a}")) == 3
    assert runs(client, auth, f"?cron_id={c}") == []


def test_runs_are_filtered_by_state(client, auth, three_crons):
    a, b, _ = three_crons
    assert [(r["cron_id"], r["state"]) for r in runs(client, auth, "?state=running")] == [
        (b, "running")] * 2
    assert len(runs(client, auth, "?state=exited")) == 3
    assert runs(client, auth, "?state=accepted") == []


def test_the_limit_defaults_to_50_and_caps_the_page(client, auth, make_cron):
    cron = make_cron()["id"]
    for n in range(52):
        send(client, auth, cron, execution_id(1700000000 + n, n))
    assert len(runs(client, auth)) == 50
    assert len(runs(client, auth, "?limit=2")) == 2
    assert len(runs(client, auth, "?limit=500")) == 52


BAD_QUERIES = ["?limit=0", "?limit=501", "?limit=abc", "?limit=-1", "?cron_id=x", "?state=done",
               "?state=RUNNING", "?before=nope", f"?before={UUID.upper()}"]


def test_a_bad_query_parameter_is_a_400_naming_it(client, auth):
    for query in BAD_QUERIES:
        response = client.get(f"/open/runs{query}", headers=auth)
        assert response.status_code == 400, query
        body = response.get_json()
        assert body["code"] == 400
        assert query[1:].split("=")[0] in body["message"], query


def test_before_pages_through_every_run_without_duplicates_or_gaps(client, auth, make_cron):
    cron = make_cron()["id"]
    # Several runs share one second: the run id, not accepted_at alone, orders them.
    for n in range(11):
        send(client, auth, cron, execution_id(1700000000 + n // 3, n))
    everything = [r["id"] for r in runs(client, auth)]
    pages, before = [], ""
    while True:
        page = runs(client, auth, f"?limit=4{before}")
        if not page:
            break
        pages.append([r["id"] for r in page])
        before = f"&before={page[-1]['id']}"
    assert [len(p) for p in pages] == [4, 4, 3]
    assert [run for page in pages for run in page] == everything
    assert len(set(everything)) == 11


def test_one_run_is_shown_by_its_id(client, auth, three_crons):
    for run in runs(client, auth):
        response = client.get(f"/open/runs/{run['id']}", headers=auth)
        assert response.status_code == 200
        assert response.get_json() == {"code": 200, "data": run}


def test_an_unknown_run_is_a_json_404(client, auth, three_crons):
    for run_id in ("019ad20f-2800-7b96-9e03-1ff0f2a0435b", "00000000-03e9-7427-93c0-16493082c25d",
                   "nope"):
        response = client.get(f"/open/runs/{run_id}", headers=auth)
        assert response.status_code == 404
        assert response.get_json() == {"code": 404, "message": f"Run {run_id} does not exist."}


def test_failures_are_listed_newest_first(client, auth, make_cron):
    cron = make_cron()["id"]
    send(client, auth, cron, "not-an-id")
    send(client, auth, 999, execution_id(1700000000))
    response = client.get("/open/runs/failures", headers=auth)
    assert response.status_code == 200
    listed = response.get_json()["data"]
    assert [(f["reason"], f["request_id"], f["cron_id"]) for f in listed] == [
        ("unknown_cron", execution_id(1700000000), 999),
        ("invalid_execution_id", "not-an-id", cron)]
    assert all(set(f) >= {"at", "reason", "request_id", "cron_id", "detail"} for f in listed)


def test_reading_runs_needs_the_runs_scope(client, auth):
    with db.database.connection_context(), db.write_transaction():
        client_id, secret = create_app_record("crons-only", ["crons"])
    got = client.get(f"/open/auth/token?client_id={client_id}&client_secret={secret}")
    headers = {"Authorization": f"Bearer {got.get_json()['data']['token']}"}
    for path in ("/open/runs", "/open/runs/failures",
                 "/open/runs/019ad20f-2800-7b96-9e03-1ff0f2a0435b"):
        response = client.get(path, headers=headers)
        assert (response.status_code, response.get_json()["code"]) == (403, 403), path
        assert client.get(path).status_code == 401
        assert client.get(path, headers=auth).status_code in (200, 404)


def test_the_runs_command_prints_the_runs(client, auth, three_crons, make_settings):
    a, b, _ = three_crons
    env = {"QL_DB_URL": make_settings().db_url, "QL_DATA_DIR": make_settings().data_dir,
           **SHADOW_ON}
    printed = json.loads(run_cli(env, "runs", "--json").stdout)
    assert printed == {"data": runs(client, auth)}
    only_b = json.loads(run_cli(env, "runs", "--cron", str(b), "--json").stdout)["data"]
    assert [r["cron_id"] for r in only_b] == [b, b]


def test_the_failures_command_prints_the_failures(client, auth, make_cron, make_settings):
    make_cron()
    send(client, auth, 999, execution_id(1700000000))
    env = {"QL_DB_URL": make_settings().db_url, "QL_DATA_DIR": make_settings().data_dir}
    printed = json.loads(run_cli(env, "accept-failures", "--json").stdout)
    assert [(f["reason"], f["cron_id"]) for f in printed] == [("unknown_cron", 999)]
    assert printed == client.get("/open/runs/failures", headers=auth).get_json()["data"]


@pytest.mark.parametrize("backend", ["postgres"])
def test_a_run_is_found_by_id_under_a_linguistic_collation(client, auth, make_cron):
    # en_US/ICU collations ignore punctuation, so a key range built from text would miss
    # rows; the key is binary (accepted_at, id), and the Run's one text column (log_path)
    # is only carried, never compared, so it may have any collation.
    db.ensure_connection()
    with db.database.atomic():
        db.database.execute_sql('ALTER TABLE shadow_runs ALTER COLUMN log_path '
                                'TYPE text COLLATE "en-US-x-icu"')
    send(client, auth, make_cron()["id"], execution_id(1764460800))
    (run,) = runs(client, auth)
    response = client.get(f"/open/runs/{run['id']}", headers=auth)
    assert response.status_code == 200
    assert response.get_json()["data"] == run
