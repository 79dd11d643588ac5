"""One rule for every id list (CONTRACT.md §2.1): the callback's `ids`, the bodies of the cron
endpoints and the CLI's ids. Duplicates (5 and "5" too) collapse to the first, order kept."""
from __future__ import annotations

import pytest

from qlshadow.errors import InvalidInput
from qlshadow.storage.models import Cron, RunningInstance, ShadowFailure, ShadowRun
from qlshadow.parse import INT64_MAX, parse_ids
from helpers import SHADOW_ON, STATUS_PATH, cli_env, http, run_cli, table_rows
from shellenv import instances_of, wait_for

VALID = "legacy-system:1764460800:3f2b8c1e-9d4a-4e6b-8f1a-2c3d4e5f6a7b"
BAD_LISTS = ([], None, {"ids": [1]}, "1", [0], [-1], ["x"], ["01x"], [1.5], [True], [None],
             ["\u0661"], [INT64_MAX + 1], [str(INT64_MAX + 1)])


def test_duplicates_collapse_to_the_first_and_the_order_is_kept():
    assert parse_ids([7, 3, "7", 3, "12", 7]) == (7, 3, 12)


@pytest.mark.parametrize("value", BAD_LISTS)
def test_anything_but_a_non_empty_list_of_positive_ids_is_refused_naming_the_field(value):
    with pytest.raises(InvalidInput, match="^'ids' must be a non-empty list of positive"):
        parse_ids(value, "ids")
    with pytest.raises(InvalidInput, match="^The request body must be a non-empty list"):
        parse_ids(value)


# --- the status callback -------------------------------------------------------------------

@pytest.mark.parametrize("shadow_env", [SHADOW_ON])
def test_a_callback_naming_its_cron_twice_is_one_cron_and_one_run(client, auth, make_cron):
    cron_id = make_cron()["id"]
    body = {"ids": [cron_id, str(cron_id), cron_id], "status": 0, "pid": 41,
            "log_path": "a.log", "last_execution_time": 1764460800, "execution_id": VALID}

    assert client.put(STATUS_PATH, json=body, headers=auth).status_code == 200

    assert [r["cron"] for r in table_rows(RunningInstance)] == [cron_id]
    runs = table_rows(ShadowRun, order_by=ShadowRun.accepted_at)
    assert [(r["cron_id"], r["finished_at"]) for r in runs] == [(cron_id, None)]  # running
    assert table_rows(ShadowFailure) == []


@pytest.mark.parametrize("ids", [[0], ["x"], [1.5]])
def test_a_callback_with_a_bad_id_list_is_a_400_naming_ids_and_writes_nothing(
        client, auth, make_cron, ids):
    make_cron()
    before = (table_rows(Cron), table_rows(RunningInstance))
    response = client.put(STATUS_PATH, json={"ids": ids, "status": 0}, headers=auth)
    assert (response.status_code, response.get_json()["code"]) == (400, 400)
    assert response.get_json()["message"].startswith("'ids' must be")
    assert (table_rows(Cron), table_rows(RunningInstance)) == before


# --- the cron endpoints --------------------------------------------------------------------

def test_delete_with_repeated_ids_deletes_each_cron_once(client, auth, make_cron):
    kept, gone = make_cron(name="kept")["id"], make_cron(name="gone")["id"]
    response = client.delete("/open/crons", json=[gone, str(gone), gone], headers=auth)
    assert (response.status_code, response.get_json()) == (200, {"code": 200})
    assert [r["id"] for r in table_rows(Cron)] == [kept]


@pytest.mark.parametrize("path,disabled", [("/open/crons/disable", 1), ("/open/crons/enable", 0)])
def test_enable_and_disable_with_repeated_ids_apply_once(client, auth, make_cron, path, disabled):
    first, second = make_cron(name="a")["id"], make_cron(name="b")["id"]
    client.put("/open/crons/disable" if not disabled else "/open/crons/enable",
               json=[first, second], headers=auth)
    response = client.put(path, json=[second, str(second), second], headers=auth)
    assert response.status_code == 200
    assert {r["id"]: r["is_disabled"] for r in table_rows(Cron)} == {
        first: 1 - disabled, second: disabled}


@pytest.mark.parametrize("path,method", [("/open/crons", "DELETE"), ("/open/crons/disable", "PUT"),
                                         ("/open/crons/enable", "PUT"), ("/open/crons/run", "PUT")])
def test_a_cron_endpoint_refuses_a_bad_id_list_in_the_same_words(client, auth, make_cron,
                                                                 path, method):
    make_cron()
    before = table_rows(Cron)
    response = client.open(path, method=method, json=[1, "x"], headers=auth)
    assert response.get_json() == {
        "code": 400,
        "message": "The request body must be a non-empty list of positive integer cron ids."}
    assert table_rows(Cron) == before


def test_a_manual_run_of_a_repeated_id_starts_one_run(live_server):
    server = live_server()
    status, body = http("POST", f"{server.url}/open/crons",
                        {"name": "once", "command": "exit 0", "schedule": "0 4 * * *"},
                        server.headers)
    cron_id = body["data"]["id"]

    answer = http("PUT", f"{server.url}/open/crons/run", [cron_id, str(cron_id)], server.headers)

    assert answer == (200, {"code": 200, "data": [cron_id]})
    instances = wait_for(lambda: [i for i in instances_of(server, cron_id)
                                  if i["finished_at"] is not None])
    assert len(instances_of(server, cron_id)) == len(instances) == 1


# --- the command line ----------------------------------------------------------------------

def test_the_cli_takes_a_repeated_id_once(settings, make_cron):
    first, second = make_cron(name="a")["id"], make_cron(name="b")["id"]
    env = cli_env(settings)
    run_cli(env, "cron", "disable", str(second), str(second))
    run_cli(env, "cron", "rm", str(first), str(first))
    assert [(r["id"], r["is_disabled"]) for r in table_rows(Cron)] == [(second, 1)]
