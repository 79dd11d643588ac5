"""The 2.x status callback, PUT/POST /open/crons/status: rules 1-5 of CONTRACT.md §3.1 and its
strict parsing (an ill-typed Legacy field is a 400 that writes nothing)."""
from __future__ import annotations

import json
import os
import time

import pytest

from qlshadow.storage.models import Cron, RunningInstance
from helpers import FIXTURES, ONE_BACKEND, fixture_body, table_rows

LOG = "backup/2026-11-30-08-00-00-123.log"


@pytest.fixture
def cron(make_cron) -> dict:
    return make_cron()


@pytest.fixture
def send(client, auth):
    """Send a callback body (dict, or raw bytes) and return the response."""
    def send(body, method="PUT", headers=None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return client.open("/open/crons/status", method=method, data=data,
                           headers={**auth, "Content-Type": "application/json", **(headers or {})})
    return send


def running(cron_id, **changes) -> dict:
    """The 2.x running fixture for this cron (ids rewritten), with keys replaced."""
    return fixture_body("callback_running", **{"ids": [str(cron_id)], **changes})


def idle(cron_id, **changes) -> dict:
    """The 2.x idle fixture for this cron (ids rewritten), with keys replaced."""
    return fixture_body("callback_idle", **{"ids": [str(cron_id)], **changes})


def cron_row(cron_id) -> dict:
    return next(r for r in table_rows(Cron) if r["id"] == cron_id)


def instances(cron_id=None) -> list:
    return [r for r in table_rows(RunningInstance) if cron_id is None or r["cron"] == cron_id]


def snapshot() -> tuple:
    return table_rows(Cron), table_rows(RunningInstance)


# --- the 2.x shell bodies -------------------------------------------------------------------

def test_the_shell_bodies_update_cron_12_exactly_as_2x(client, auth, make_cron):
    for n in range(12):
        make_cron(name=f"job{n + 1}")
    with open(os.path.join(FIXTURES, "callback_running.json"), "rb") as fh:
        running_raw = fh.read()
    with open(os.path.join(FIXTURES, "callback_idle.json"), "rb") as fh:
        idle_raw = fh.read()

    first = client.put("/open/crons/status", data=running_raw, headers=auth)
    during = cron_row(12)
    second = client.put("/open/crons/status", data=idle_raw, headers=auth)

    assert (first.status_code, first.get_json()) == (200, {"code": 200})
    assert (second.status_code, second.get_json()) == (200, {"code": 200})
    assert (during["status"], during["pid"], during["log_path"], during["last_execution_time"]) == (
        0, 4242, LOG, 1764489600)
    after = cron_row(12)
    assert (after["status"], after["pid"], after["log_path"], after["last_execution_time"],
            after["last_running_time"]) == (1, 4242, LOG, 1764489600, 7)
    [instance] = instances()
    assert (instance["cron"], instance["pid"], instance["log_path"], instance["started_at"],
            instance["status"], instance["exit_code"]) == (12, 4242, LOG, 1764489600, 1, 0)
    assert instance["finished_at"] is not None
    assert all(r["status"] == 1 and r["pid"] is None for r in table_rows(Cron) if r["id"] != 12)


def test_post_is_accepted_like_put(send, cron):
    response = send(running(cron["id"]), method="POST")

    assert (response.status_code, response.get_json()) == (200, {"code": 200})
    assert cron_row(cron["id"])["status"] == 0


def test_it_parses_the_body_as_json_whatever_the_content_type(send, cron):
    # curl -d sends application/x-www-form-urlencoded; the body is JSON all the same.
    response = send(running(cron["id"]), headers={"Content-Type": "application/x-www-form-urlencoded"})

    assert response.status_code == 200
    assert cron_row(cron["id"])["pid"] == 4242


def test_it_answers_exactly_code_200_and_nothing_else(send, cron):
    response = send(running(cron["id"]))

    assert response.status_code == 200
    assert response.mimetype == "application/json"
    assert json.loads(response.data) == {"code": 200}


def test_it_ignores_unknown_keys(send, cron):
    body = running(cron["id"], future_field={"strict": [1, 2]}, another="x", retries=-1)

    response = send(body)

    assert response.status_code == 200
    assert cron_row(cron["id"])["status"] == 0
    assert len(instances(cron["id"])) == 1


def test_it_accepts_integer_ids_and_statuses(send, cron):
    send(running(cron["id"], ids=[cron["id"]], status=0, pid=99))
    send(idle(cron["id"], ids=[cron["id"]], status=1, pid=99))

    row = cron_row(cron["id"])
    assert (row["status"], row["pid"]) == (1, 99)
    assert instances(cron["id"])[0]["status"] == 1


# --- rule 1 ---------------------------------------------------------------------------------

def test_an_unknown_id_is_skipped_silently(send, cron):
    before = snapshot()

    response = send(running(987654))

    assert (response.status_code, response.get_json()) == (200, {"code": 200})
    assert snapshot() == before


def test_an_unknown_id_beside_a_known_one_does_not_stop_the_known_one(send, cron):
    response = send(running(cron["id"], ids=["987654", str(cron["id"])]))

    assert response.status_code == 200
    assert cron_row(cron["id"])["status"] == 0
    assert [r["cron"] for r in instances()] == [cron["id"]]


# --- rule 2 ---------------------------------------------------------------------------------

def test_a_late_finish_of_an_older_run_keeps_the_newer_runs_status_log_path_and_pid(send, cron):
    send(running(cron["id"], pid="100", log_path="backup/old.log"))
    send(running(cron["id"], pid="200", log_path="backup/new.log"))

    response = send(idle(cron["id"], pid="100", log_path="backup/old.log"))

    assert response.status_code == 200
    row = cron_row(cron["id"])
    assert (row["status"], row["pid"], row["log_path"]) == (0, 200, "backup/new.log")


def test_a_late_finish_still_writes_duration_and_start_time(send, cron):
    send(running(cron["id"], pid="200", log_path="backup/new.log", last_execution_time=2000))

    send(idle(cron["id"], pid="100", log_path="backup/old.log", last_execution_time=1000,
              last_running_time=42))

    row = cron_row(cron["id"])
    assert (row["last_execution_time"], row["last_running_time"]) == (1000, 42)
    assert row["status"] == 0


def test_a_late_finish_still_closes_its_own_instance(send, cron):
    send(running(cron["id"], pid="100", log_path="backup/old.log"))
    send(running(cron["id"], pid="200", log_path="backup/new.log"))

    send(idle(cron["id"], pid="100", log_path="backup/old.log", exit_code=3))

    by_pid = {r["pid"]: r for r in instances(cron["id"])}
    assert (by_pid[100]["status"], by_pid[100]["exit_code"]) == (3, 3)
    assert by_pid[100]["finished_at"] is not None
    assert (by_pid[200]["status"], by_pid[200]["finished_at"]) == (0, None)


def test_an_idle_callback_without_log_path_marks_the_cron_idle(send, cron):
    send(running(cron["id"]))
    body = idle(cron["id"])
    del body["log_path"]

    send(body)

    row = cron_row(cron["id"])
    assert (row["status"], row["log_path"]) == (1, LOG)


# --- rule 3 ---------------------------------------------------------------------------------

@pytest.mark.parametrize("empty_pid", ["''", "", None], ids=["two-quotes", "empty", "null"])
def test_an_empty_pid_counts_as_not_given(send, cron, empty_pid):
    send(running(cron["id"], pid="4242"))

    response = send(running(cron["id"], pid=empty_pid, log_path="backup/next.log"))

    assert response.status_code == 200
    row = cron_row(cron["id"])
    assert (row["pid"], row["log_path"]) == (4242, "backup/next.log")
    assert instances(cron["id"])[-1]["pid"] is None


def test_a_pid_of_zero_counts_as_given(send, cron):
    send(running(cron["id"], pid="4242"))

    send(running(cron["id"], pid=0))

    assert cron_row(cron["id"])["pid"] == 0
    assert instances(cron["id"])[-1]["pid"] == 0


def test_a_last_execution_time_of_zero_counts_as_given(send, cron):
    send(running(cron["id"], last_execution_time=1764489600))

    send(running(cron["id"], last_execution_time=0))

    assert cron_row(cron["id"])["last_execution_time"] == 0


def test_absent_and_null_fields_leave_the_columns_alone(send, cron):
    send(running(cron["id"]))

    send({"ids": [str(cron["id"])], "status": "0", "log_path": None, "last_execution_time": None})

    row = cron_row(cron["id"])
    assert (row["status"], row["pid"], row["log_path"], row["last_execution_time"]) == (
        0, 4242, LOG, 1764489600)


def test_an_empty_log_path_counts_as_not_given(send, cron):
    send(running(cron["id"]))

    send(running(cron["id"], log_path=""))

    assert cron_row(cron["id"])["log_path"] == LOG
    assert instances(cron["id"])[-1]["log_path"] is None


def test_last_running_time_is_written_only_when_above_zero(send, cron):
    send(running(cron["id"]))
    send(idle(cron["id"], last_running_time=7))
    send(running(cron["id"]))

    send(idle(cron["id"], last_running_time=0))

    row = cron_row(cron["id"])
    assert (row["status"], row["last_running_time"]) == (1, 7)


# --- rule 4 ---------------------------------------------------------------------------------

def test_a_running_callback_inserts_a_running_instance_started_at_the_given_time(send, cron):
    send(running(cron["id"]))

    [row] = instances(cron["id"])
    assert (row["pid"], row["log_path"], row["started_at"], row["finished_at"], row["status"],
            row["exit_code"]) == (4242, LOG, 1764489600, None, 0, None)


@pytest.mark.parametrize("start", [0, None], ids=["zero", "absent"])
def test_a_running_instance_without_a_positive_start_starts_now(send, cron, start):
    body = running(cron["id"], last_execution_time=start)
    if start is None:
        del body["last_execution_time"]
    before = int(time.time())

    send(body)

    after = int(time.time())
    assert before <= instances(cron["id"])[0]["started_at"] <= after


def test_an_idle_callback_inserts_no_instance(send, cron):
    send(idle(cron["id"]))

    assert instances() == []


# --- rule 5 ---------------------------------------------------------------------------------

def test_an_idle_callback_with_exit_code_zero_finishes_the_instance(send, cron):
    send(running(cron["id"]))
    before = int(time.time())

    send(idle(cron["id"], exit_code=0))

    [row] = instances(cron["id"])
    assert (row["status"], row["exit_code"]) == (1, 0)
    assert before <= row["finished_at"] <= int(time.time())


def test_an_idle_callback_with_a_non_zero_exit_code_marks_the_instance_error(send, cron):
    send(running(cron["id"]))

    send(idle(cron["id"], exit_code=127))

    [row] = instances(cron["id"])
    assert (row["status"], row["exit_code"]) == (3, 127)


def test_a_negative_exit_code_marks_the_instance_error(send, cron):
    send(running(cron["id"]))

    send(idle(cron["id"], exit_code=-9))

    assert (instances(cron["id"])[0]["status"], instances(cron["id"])[0]["exit_code"]) == (3, -9)


def test_an_idle_callback_without_exit_code_finishes_the_instance(send, cron):
    send(running(cron["id"]))
    body = idle(cron["id"])
    del body["exit_code"]

    send(body)

    [row] = instances(cron["id"])
    assert (row["status"], row["exit_code"]) == (1, None)


def test_an_idle_callback_closes_only_instances_with_the_same_pid(send, cron):
    send(running(cron["id"], pid="100"))
    send(running(cron["id"], pid="200"))

    send(idle(cron["id"], pid="100"))

    by_pid = {r["pid"]: r["status"] for r in instances(cron["id"])}
    assert by_pid == {100: 1, 200: 0}


def test_an_idle_callback_without_pid_closes_the_instances_without_pid(send, cron):
    send(running(cron["id"], pid="''"))
    send(running(cron["id"], pid="300"))

    send(idle(cron["id"], pid="''"))

    by_pid = {r["pid"]: r["status"] for r in instances(cron["id"])}
    assert by_pid == {None: 1, 300: 0}


def test_an_idle_callback_leaves_finished_instances_alone(send, cron):
    send(running(cron["id"]))
    send(idle(cron["id"], exit_code=0))
    finished = instances(cron["id"])

    send(idle(cron["id"], exit_code=5))

    assert instances(cron["id"]) == finished


def test_an_idle_callback_closes_only_instances_of_its_own_cron(send, make_cron):
    first, second = make_cron(name="a"), make_cron(name="b")
    send(running(first["id"]))
    send(running(second["id"]))

    send(idle(first["id"]))

    assert {r["cron"]: r["status"] for r in instances()} == {first["id"]: 1, second["id"]: 0}


# --- several ids, other statuses ------------------------------------------------------------

def test_several_ids_are_all_updated(send, make_cron):
    first, second = make_cron(name="a"), make_cron(name="b")

    send(running(first["id"], ids=[str(first["id"]), second["id"]]))
    send(idle(first["id"], ids=[str(first["id"]), second["id"]]))

    for cron_id in (first["id"], second["id"]):
        row = cron_row(cron_id)
        assert (row["status"], row["pid"], row["last_running_time"]) == (1, 4242, 7)
        assert [r["status"] for r in instances(cron_id)] == [1]


def test_statuses_disabled_and_queued_are_accepted_and_written(send, cron):
    send(running(cron["id"]))
    for status in (2, "2", 3, "3"):
        response = send(running(cron["id"], status=status, pid="77", log_path=f"backup/{status}.log"))

        assert (response.status_code, response.get_json()) == (200, {"code": 200})
        row = cron_row(cron["id"])
        assert (row["status"], row["pid"], row["log_path"]) == (int(status), 77, f"backup/{status}.log")
    # neither opens nor closes an instance
    assert [(r["pid"], r["status"]) for r in instances(cron["id"])] == [(4242, 0)]


# --- strict parsing: 400, nothing written ---------------------------------------------------

def _assert_each_refused(send, cron, bodies):
    send(running(cron["id"]))
    before = snapshot()
    for body in bodies:
        response = send(body)
        assert response.status_code == 400, body
        assert response.get_json()["code"] == 400, body
        assert isinstance(response.get_json()["message"], str), body
        assert snapshot() == before, body


def _with(cron, key, value, base=idle):
    body = base(cron["id"], pid="555", log_path="backup/other.log", last_running_time=99)
    if value is _ABSENT:
        del body[key]
    else:
        body[key] = value
    return body


_ABSENT = object()


def test_it_refuses_ill_typed_ids(send, cron):
    good = str(cron["id"])
    bad = [_ABSENT, [], None, good, int(good), True, {"0": good}, [-1], ["-1"], [0], ["0"],
           [1.0], [1.5], ["12a"], [" 1"], [""], [None], [True], [[1]], [good, "x"],
           [int(good), 2**63], ["١"]]
    _assert_each_refused(send, cron, [_with(cron, "ids", value) for value in bad])


def test_it_refuses_an_invalid_status(send, cron):
    bad = [_ABSENT, None, "", "idle", 4, "4", -1, True, False, 1.0, "01", [1], {"s": 1}]
    _assert_each_refused(send, cron, [_with(cron, "status", value) for value in bad])


def test_it_refuses_an_ill_typed_pid(send, cron):
    bad = [-1, "-1", 1.5, 4242.0, True, "abc", "12 ", [1], {"p": 1}, "٣", 2**63]
    _assert_each_refused(send, cron, [_with(cron, "pid", value) for value in bad])


def test_it_refuses_an_ill_typed_log_path(send, cron):
    bad = ["x" * 1025, 123, True, ["a.log"], {"p": "a"}, "a\x00b.log", "\ud800.log"]
    _assert_each_refused(send, cron, [_with(cron, "log_path", value) for value in bad])


def test_it_accepts_a_log_path_of_exactly_1024_characters(send, cron):
    response = send(running(cron["id"], log_path="x" * 1024))

    assert response.status_code == 200
    assert cron_row(cron["id"])["log_path"] == "x" * 1024


def test_it_refuses_an_ill_typed_last_execution_time(send, cron):
    bad = [-1, "1764489600", 1.5, 1764489600.0, True, [1], 2**63]
    _assert_each_refused(send, cron, [_with(cron, "last_execution_time", value) for value in bad])


def test_it_refuses_an_ill_typed_last_running_time(send, cron):
    bad = [-1, "7", 7.0, True, {"s": 7}]
    _assert_each_refused(send, cron, [_with(cron, "last_running_time", value) for value in bad])


def test_it_refuses_an_ill_typed_exit_code(send, cron):
    bad = [1.5, 0.0, "0", True, [0], 2**31, -(2**31) - 1]
    _assert_each_refused(send, cron, [_with(cron, "exit_code", value) for value in bad])


def test_it_refuses_a_body_that_is_not_an_object(send, cron):
    bad = [b"[]", b'["12"]', b'"x"', b"1", b"null", b"true"]
    _assert_each_refused(send, cron, bad)


def test_it_refuses_a_body_that_is_not_json(send, cron):
    good = json.dumps(idle(cron["id"], pid="555", log_path="backup/other.log")).encode()
    bad = [b"", b"{", good[:-1], b"ids=12&status=1", good.replace(b'"555"', b'"5\xff5"'),
           good.replace(b"}", b',"x":NaN}'), good.replace(b"}", b',"x":Infinity}'),
           good.replace(b"}", b',"x":-Infinity}'), b"\xef\xbb\xbf" + good[:5],
           good.replace(b"}", b',"deep":' + b"[" * 30000 + b"]" * 30000 + b"}")]
    _assert_each_refused(send, cron, bad)


@ONE_BACKEND
def test_a_refusal_names_the_bad_field(send, cron):
    response = send(_with(cron, "last_execution_time", "soon"))

    assert "last_execution_time" in response.get_json()["message"]


def test_a_callback_without_token_is_refused_and_writes_nothing(client, cron):
    before = snapshot()

    response = client.put("/open/crons/status", json=running(cron["id"]))

    assert response.status_code == 401
    assert snapshot() == before
