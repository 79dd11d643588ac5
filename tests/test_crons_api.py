"""The 2.x cron endpoints (CONTRACT.md §4): list, show, create, update, delete, enable, disable,
instances; schedule validation; 2.x field names and numeric codes."""
from __future__ import annotations

import pytest

from qlshadow.storage.models import Cron, RunningInstance
from helpers import fixture_body, table_rows

CRON_FIELDS = {"id", "name", "command", "schedule", "status", "pid", "log_path", "hosts", "hosts_mode",
               "last_execution_time", "last_running_time", "isDisabled", "task_before",
               "task_after", "work_dir", "log_name", "extra_schedules",
               "allow_multiple_instances", "createdAt", "updatedAt",
               "alert_after", "max_runtime", "quiet", "snooze_until"}  # alert tuning
INSTANCE_FIELDS = {"id", "cron_id", "pid", "log_path", "started_at", "finished_at", "status", "host",
                   "exit_code"}


def callback(client, auth, cron_id, name, **changes):
    body = fixture_body(name, **{"ids": [str(cron_id)], **changes})
    assert client.put("/open/crons/status", json=body, headers=auth).status_code == 200


def assert_400_naming(response, word: str) -> None:
    body = response.get_json()
    assert (response.status_code, body["code"]) == (400, 400)
    assert word in body["message"]


# --- create ---------------------------------------------------------------------------------

def test_create_answers_the_new_cron_with_2x_fields_and_codes(client, auth):
    response = client.post("/open/crons", json=fixture_body("cron_backup"), headers=auth)

    assert (response.status_code, response.get_json()["code"]) == (200, 200)
    cron = response.get_json()["data"]
    assert set(cron) == CRON_FIELDS
    assert (cron["name"], cron["command"], cron["schedule"]) == (
        "backup", "task backup.sh", "*/5 * * * *")
    assert (cron["status"], cron["isDisabled"], cron["pid"], cron["log_path"]) == (1, 0, None, None)
    assert [r["id"] for r in table_rows(Cron)] == [cron["id"]]


def test_create_stores_the_optional_fields(client, auth):
    body = {**fixture_body("cron_backup"), "task_before": "echo a", "task_after": "echo b",
            "work_dir": "/srv", "log_name": "bk", "extra_schedules": [{"schedule": "0 3 * * *"}]}

    cron = client.post("/open/crons", json=body, headers=auth).get_json()["data"]

    shown = client.get(f"/open/crons/{cron['id']}", headers=auth).get_json()["data"]
    assert (shown["task_before"], shown["task_after"], shown["work_dir"], shown["log_name"],
            shown["extra_schedules"]) == ("echo a", "echo b", "/srv", "bk", [{"schedule": "0 3 * * *"}])


GOOD_SCHEDULES = [
    ("*/5 * * * *", "*/5 * * * *"),
    ("0 0 * * *", "0 0 * * *"),
    ("30 */2 * * * *", "30 */2 * * * *"),
    ("@once", "@once"),
    ("@boot", "@boot"),
    ("0 9 * jan mon", "0 9 * jan mon"),
    ("0 9 1-15 JAN-MAR mon-fri", "0 9 1-15 JAN-MAR mon-fri"),
    ("1,15,30 * * * *", "1,15,30 * * * *"),
    ("0-30/5 8-18 * * 1-5", "0-30/5 8-18 * * 1-5"),
    ("0 0 * * 7", "0 0 * * 7"),
    ("59 23 31 12 6", "59 23 31 12 6"),
    (" */5   *  * * * ", "*/5 * * * *"),
]


def test_create_accepts_each_valid_schedule_and_stores_it_normalised(client, auth):
    for schedule, stored in GOOD_SCHEDULES:
        response = client.post("/open/crons", json={**fixture_body("cron_backup"), "schedule": schedule},
                               headers=auth)
        assert response.status_code == 200, schedule
        assert response.get_json()["data"]["schedule"] == stored
    assert [r["schedule"] for r in table_rows(Cron)] == [stored for _, stored in GOOD_SCHEDULES]


BAD_SCHEDULES = ["* * * *", "* * * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *",
                 "* * 32 * *", "* * * 13 *", "* * * * 8", "*/0 * * * *", "5-1 * * * *",
                 "abc * * * *", "* * * foo *", "* * * * funday", "1,,2 * * * *", "1- * * * *",
                 "-1 * * * *", "*/x * * * *", "60 * * * * *", "@daily", "@reboot", "",
                 "   ", "@once now"]


def test_create_refuses_each_bad_schedule_with_a_400_naming_it(client, auth):
    for schedule in BAD_SCHEDULES:
        response = client.post("/open/crons", json={**fixture_body("cron_backup"), "schedule": schedule},
                               headers=auth)
        assert_400_naming(response, "schedule")
        if schedule.strip():
            assert repr(schedule) in response.get_json()["message"], schedule
    assert table_rows(Cron) == []


def test_create_refuses_a_schedule_that_is_not_a_string(client, auth):
    for schedule in (None, 5, ["* * * * *"], {"s": 1}):
        response = client.post("/open/crons", json={**fixture_body("cron_backup"), "schedule": schedule},
                               headers=auth)
        assert_400_naming(response, "schedule")
    assert table_rows(Cron) == []


def test_create_refuses_a_bad_extra_schedule(client, auth):
    body = {**fixture_body("cron_backup"), "extra_schedules": [{"schedule": "61 * * * *"}]}

    assert_400_naming(client.post("/open/crons", json=body, headers=auth), "extra_schedules")
    assert table_rows(Cron) == []


def test_create_refuses_a_missing_required_field(client, auth):
    for key in ("name", "command", "schedule"):
        body = fixture_body("cron_backup")
        del body[key]
        assert_400_naming(client.post("/open/crons", json=body, headers=auth), key)
    assert table_rows(Cron) == []


def test_create_refuses_an_empty_or_ill_typed_name_or_command(client, auth):
    for key, value in (("name", ""), ("name", "  "), ("name", 5), ("command", None), ("command", ["a"]),
                       ("name", "a\x00b"), ("command", "\udfff")):
        body = {**fixture_body("cron_backup"), key: value}
        assert_400_naming(client.post("/open/crons", json=body, headers=auth), key)
    assert table_rows(Cron) == []


def test_create_refuses_a_body_that_is_not_an_object(client, auth):
    response = client.post("/open/crons", json=[fixture_body("cron_backup")], headers=auth)

    assert (response.status_code, response.get_json()["code"]) == (400, 400)


# --- list and show --------------------------------------------------------------------------

def test_list_shows_the_newest_first_with_the_total(client, auth, make_cron):
    ids = [make_cron(name=f"job{n}")["id"] for n in range(3)]

    response = client.get("/open/crons", headers=auth)

    data = response.get_json()["data"]
    assert [c["id"] for c in data["data"]] == ids[::-1]
    assert data["total"] == 3
    assert all(set(c) == CRON_FIELDS for c in data["data"])


def test_list_pages_by_page_and_size(client, auth, make_cron):
    ids = [make_cron(name=f"job{n}")["id"] for n in range(5)]

    pages = [client.get("/open/crons", query_string={"page": p, "size": 2}, headers=auth).get_json()["data"]
             for p in (1, 2, 3, 4)]

    assert [[c["id"] for c in page["data"]] for page in pages] == [
        ids[4:2:-1], ids[2:0:-1], ids[:1], []]
    assert {page["total"] for page in pages} == {5}


def test_list_refuses_a_bad_page_or_size(client, auth):
    for query in ({"page": 0}, {"page": "x"}, {"size": 0}, {"size": 501}, {"size": "-1"}):
        response = client.get("/open/crons", query_string=query, headers=auth)
        assert_400_naming(response, next(iter(query)))


def test_show_answers_one_cron(client, auth, make_cron):
    cron = make_cron(name="shown")

    response = client.get(f"/open/crons/{cron['id']}", headers=auth)

    assert (response.status_code, response.get_json()["data"]) == (200, cron)


def test_show_of_a_missing_cron_is_a_json_404(client, auth):
    response = client.get("/open/crons/424242", headers=auth)

    assert response.status_code == 404
    assert response.get_json()["code"] == 404 and "424242" in response.get_json()["message"]


# --- update ---------------------------------------------------------------------------------

def test_update_changes_only_the_given_fields(client, auth, make_cron):
    cron = make_cron(task_before="echo a")

    response = client.put("/open/crons", json={"id": cron["id"], "name": "renamed"}, headers=auth)

    changed = response.get_json()["data"]
    assert response.status_code == 200
    assert changed["name"] == "renamed"
    assert {k: v for k, v in changed.items() if k not in ("name", "updatedAt")} == {
        k: v for k, v in cron.items() if k not in ("name", "updatedAt")}
    assert table_rows(Cron)[0]["name"] == "renamed"


def test_update_accepts_a_new_valid_schedule(client, auth, make_cron):
    cron = make_cron()

    response = client.put("/open/crons", json={"id": str(cron["id"]), "schedule": "@boot"}, headers=auth)

    assert response.get_json()["data"]["schedule"] == "@boot"


def test_update_of_an_unknown_id_is_a_404(client, auth, make_cron):
    make_cron()

    response = client.put("/open/crons", json={"id": 424242, "name": "x"}, headers=auth)

    assert (response.status_code, response.get_json()["code"]) == (404, 404)
    assert table_rows(Cron)[0]["name"] == "backup"


def test_update_with_a_bad_schedule_is_a_400_and_changes_nothing(client, auth, make_cron):
    make_cron()
    before = table_rows(Cron)

    response = client.put("/open/crons", json={"id": before[0]["id"], "name": "renamed",
                                               "schedule": "* * *"}, headers=auth)

    assert_400_naming(response, "'* * *'")
    assert table_rows(Cron) == before


def test_update_without_a_valid_id_is_a_400(client, auth, make_cron):
    make_cron()
    before = table_rows(Cron)
    for body in ({"name": "x"}, {"id": None, "name": "x"}, {"id": 0, "name": "x"},
                 {"id": "x", "name": "x"}, {"id": 1.0, "name": "x"}, [1]):
        response = client.put("/open/crons", json=body, headers=auth)
        assert (response.status_code, response.get_json()["code"]) == (400, 400), body
    assert table_rows(Cron) == before


# --- delete, enable, disable ----------------------------------------------------------------

def test_delete_removes_the_crons_and_their_instances(client, auth, make_cron):
    gone, kept = make_cron(name="gone"), make_cron(name="kept")
    callback(client, auth, gone["id"], "callback_running")
    callback(client, auth, kept["id"], "callback_running")

    response = client.delete("/open/crons", json=[gone["id"]], headers=auth)

    assert (response.status_code, response.get_json()) == (200, {"code": 200})
    assert [r["id"] for r in table_rows(Cron)] == [kept["id"]]
    assert [r["cron"] for r in table_rows(RunningInstance)] == [kept["id"]]
    assert client.get(f"/open/crons/{gone['id']}", headers=auth).status_code == 404


def test_delete_accepts_several_ids_as_digit_strings(client, auth, make_cron):
    ids = [make_cron(name=f"job{n}")["id"] for n in range(3)]

    client.delete("/open/crons", json=[str(ids[0]), str(ids[2])], headers=auth)

    assert [r["id"] for r in table_rows(Cron)] == [ids[1]]


@pytest.mark.parametrize("path,method", [("/open/crons", "DELETE"), ("/open/crons/disable", "PUT"),
                                         ("/open/crons/enable", "PUT")])
def test_an_id_list_endpoint_refuses_a_bad_list(client, auth, make_cron, path, method):
    make_cron()
    before = table_rows(Cron)
    for body in ([], {"ids": [1]}, [0], ["x"], [1.5], [True], None):
        response = client.open(path, method=method, json=body, headers=auth)
        assert (response.status_code, response.get_json()["code"]) == (400, 400), body
    assert table_rows(Cron) == before


def test_disable_sets_is_disabled(client, auth, make_cron):
    cron, other = make_cron(name="a"), make_cron(name="b")

    response = client.put("/open/crons/disable", json=[cron["id"]], headers=auth)

    assert (response.status_code, response.get_json()) == (200, {"code": 200})
    shown = client.get(f"/open/crons/{cron['id']}", headers=auth).get_json()["data"]
    assert shown["isDisabled"] == 1
    assert client.get(f"/open/crons/{other['id']}", headers=auth).get_json()["data"]["isDisabled"] == 0


def test_enable_clears_is_disabled(client, auth, make_cron):
    cron = make_cron()
    client.put("/open/crons/disable", json=[cron["id"]], headers=auth)

    response = client.put("/open/crons/enable", json=[str(cron["id"])], headers=auth)

    assert response.status_code == 200
    assert client.get(f"/open/crons/{cron['id']}", headers=auth).get_json()["data"]["isDisabled"] == 0


# --- instances and codes --------------------------------------------------------------------

def test_instances_are_listed_newest_first_with_2x_fields(client, auth, make_cron):
    cron = make_cron()
    for pid in ("1", "2", "3"):
        callback(client, auth, cron["id"], "callback_running", pid=pid)
    callback(client, auth, cron["id"], "callback_idle", pid="2", exit_code=4)

    response = client.get(f"/open/crons/{cron['id']}/instances", headers=auth)

    rows = response.get_json()["data"]
    assert response.status_code == 200
    assert all(set(r) == INSTANCE_FIELDS for r in rows)
    assert [(r["pid"], r["status"], r["exit_code"]) for r in rows] == [(3, 0, None), (2, 3, 4), (1, 0, None)]
    assert [r["cron_id"] for r in rows] == [cron["id"]] * 3
    assert rows[0]["id"] > rows[1]["id"] > rows[2]["id"]


def test_instances_of_a_missing_cron_are_a_404(client, auth):
    response = client.get("/open/crons/424242/instances", headers=auth)

    assert (response.status_code, response.get_json()["code"]) == (404, 404)


def test_a_cron_reads_back_with_numeric_2x_codes_after_a_run(client, auth, make_cron):
    cron = make_cron()
    callback(client, auth, cron["id"], "callback_running")
    during = client.get(f"/open/crons/{cron['id']}", headers=auth).get_json()["data"]
    callback(client, auth, cron["id"], "callback_idle")
    after = client.get(f"/open/crons/{cron['id']}", headers=auth).get_json()["data"]
    instance = client.get(f"/open/crons/{cron['id']}/instances", headers=auth).get_json()["data"][0]

    assert (during["status"], during["pid"], during["last_execution_time"]) == (0, 4242, 1764489600)
    assert (after["status"], after["last_running_time"]) == (1, 7)
    assert (instance["status"], instance["exit_code"], instance["started_at"]) == (1, 0, 1764489600)
    assert isinstance(instance["finished_at"], int)
