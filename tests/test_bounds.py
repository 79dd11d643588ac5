"""Times and ids bounded at the API (docs/CONTRACT.md §3.1, §3.2): times past 2^32 - 1 are a
400 naming the field with nothing written, an execution id past it is an accept failure
(never a refused callback), and an id past 64 bits is a 404 or a 400, never a 500 (both
databases)."""
from __future__ import annotations

import uuid

import pytest

from qlshadow.storage.models import Cron, RunningInstance, ShadowFailure
from qlshadow.parse import TIME_MAX
from helpers import STATUS_PATH, cli_env, run_cli, table_rows

pytestmark = pytest.mark.shadow_on

BEYOND_64 = (2**63, 2**64, 10**30)


def _running(cron_id: int, **fields) -> dict:
    return {"ids": [cron_id], "status": 0, "pid": 77, "log_path": "b/1.log", **fields}


def test_the_time_range_ends_in_2106():
    assert TIME_MAX == 4294967295


@pytest.mark.parametrize("field", ["last_execution_time", "last_running_time"])
def test_a_time_past_the_range_is_a_400_naming_it_and_writes_nothing(client, auth, make_cron,
                                                                     field):
    cron = make_cron()
    response = client.put(STATUS_PATH, json=_running(cron["id"], **{field: TIME_MAX + 1}),
                          headers=auth)
    body = response.get_json()
    assert (response.status_code, body["code"]) == (400, 400)
    assert field in body["message"] and str(TIME_MAX) in body["message"]
    assert table_rows(RunningInstance) == [] and table_rows(Cron)[0]["status"] == 1


def test_the_last_second_of_the_range_is_stored(client, auth, make_cron):
    cron = make_cron()
    body = _running(cron["id"], last_execution_time=TIME_MAX, last_running_time=TIME_MAX)
    assert client.put(STATUS_PATH, json=body, headers=auth).status_code == 200
    assert client.put(STATUS_PATH, json={**body, "status": 1}, headers=auth).status_code == 200
    (row,) = table_rows(Cron)
    assert (row["last_execution_time"], row["last_running_time"]) == (TIME_MAX, TIME_MAX)
    assert client.get(f"/open/crons/{cron['id']}", headers=auth).status_code == 200


@pytest.mark.parametrize("seconds, admitted", [(TIME_MAX, True), (TIME_MAX + 1, False),
                                               (281474976710, False)])
def test_execution_id_seconds_past_the_range_are_an_accept_failure_not_a_refusal(
        client, auth, make_cron, seconds, admitted):
    cron = make_cron()
    eid = f"legacy-system:{seconds}:{uuid.uuid4()}"
    response = client.put(STATUS_PATH, json=_running(cron["id"], execution_id=eid),
                          headers=auth)
    assert (response.status_code, response.get_json()) == (200, {"code": 200})
    assert table_rows(Cron)[0]["status"] == 0  # Legacy is written either way
    listed = client.get("/open/runs", headers=auth).get_json()["data"]
    assert [r["request_id"] for r in listed] == ([eid] if admitted else [])
    assert [r["reason"] for r in table_rows(ShadowFailure)] == (
        [] if admitted else ["invalid_execution_id"])


@pytest.mark.parametrize("big", BEYOND_64)
@pytest.mark.parametrize("path", ["/open/crons/{}", "/open/crons/{}/instances"])
def test_a_cron_id_past_64_bits_is_a_404(client, auth, make_cron, path, big):
    make_cron()
    response = client.get(path.format(big), headers=auth)
    assert (response.status_code, response.get_json()["code"]) == (404, 404)
    assert str(big) in response.get_json()["message"]


@pytest.mark.parametrize("big", BEYOND_64)
def test_a_cron_page_for_an_id_past_64_bits_is_a_404_page(app, client, big):
    from qlshadow.storage import db
    from qlshadow.core.auth import create_app_record
    with db.database.connection_context(), db.write_transaction():
        viewer = create_app_record("viewer", ["crons", "runs"])
    client.post("/page/login", data={"client_id": viewer[0], "client_secret": viewer[1]},
                headers={"Origin": "http://localhost"})
    response = client.get(f"/page/crons/{big}")
    assert response.status_code == 404
    assert "does not exist" in response.get_data(as_text=True)


@pytest.mark.parametrize("query", [f"/open/runs?cron_id={2**64}",
                                   f"/open/runs/failures?before={2**64}",
                                   f"/open/reconcile?cron_id={2**63}",
                                   f"/open/reconcile?until={TIME_MAX + 1}",
                                   f"/open/reconcile?since={2**40}&until={2**40 + 60}"])
def test_query_ids_and_times_out_of_range_are_a_400(client, auth, query):
    response = client.get(query, headers=auth)
    assert (response.status_code, response.get_json()["code"]) == (400, 400)


def test_a_run_id_at_the_top_of_48_bits_is_a_404(client, auth):
    response = client.get("/open/runs/ffffffff-ffff-7fff-bfff-ffffffffffff", headers=auth)
    assert response.status_code == 404


@pytest.mark.parametrize("args", [("cron", "show", str(2**63)),
                                  ("runs", "--cron", str(2**64)),
                                  ("reconcile", "--since", str(2**40), "--until",
                                   str(2**40 + 60))])
def test_the_cli_refuses_ids_and_times_out_of_range_in_one_line(settings, args):
    result = run_cli(cli_env(settings), *args, check=False)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
