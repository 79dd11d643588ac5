"""The response-loss and reordering outcomes of CONTRACT.md §3.11, through HTTP, on both backends.

Each test checks the Shadow view (API and raw rows), the Legacy rows, and that every
callback answer is byte-identical to a Shadow-off app's answer to the same requests.
"""
from __future__ import annotations

import logging
from operator import itemgetter

import pytest

from qlshadow.storage import db
from qlshadow.storage.models import ShadowFailure, ShadowRun
from qlshadow.core.shadow.reader import logical_row
from helpers import STATUS_PATH, legacy_rows, play

pytestmark = pytest.mark.shadow_on



EXECUTION_ID = "legacy-system:1764460800:3f2b8c1e-9d4a-4e6b-8f1a-2c3d4e5f6a7b"
RUN_ID = "019ad20f-2800-7b96-9e03-1ff0f2a0435b"  # CONTRACT.md §3.6 known values
ATTEMPT_ID = "019ad20f-2800-710a-80b0-4803e8247736"
REVISION = "a99e6d54ea1f387e8640c8861ac48f9ab4f12934e484f5e37f335e72d9898302"
CRON = {"name": "backup", "command": "task backup.sh", "schedule": "*/5 * * * *"}
LOG = "backup/2025-11-30-00-00-00.log"
OK = b'{"code":200}\n'


def create(cron=CRON):
    return ("POST", "/open/crons", cron)


def start(cron_id=1, execution_id=EXECUTION_ID):
    body = {"ids": [cron_id], "status": 0, "pid": 4242, "log_path": LOG,
            "last_execution_time": 1764460800}
    if execution_id is not None:
        body["execution_id"] = execution_id
    return ("PUT", STATUS_PATH, body)


def finish(cron_id=1, execution_id=EXECUTION_ID, exit_code=0):
    body = {"ids": [cron_id], "status": 1, "pid": 4242, "log_path": LOG,
            "last_execution_time": 1764460800, "last_running_time": 7, "exit_code": exit_code}
    if execution_id is not None:
        body["execution_id"] = execution_id
    return ("PUT", STATUS_PATH, body)


def edit(cron_id=1, **changes):
    return ("PUT", "/open/crons", {"id": cron_id, **changes})


def shadow_view(client, auth) -> tuple:
    """(runs from GET /open/runs, raw shadow_runs rows, raw shadow_failures rows)."""
    listing = client.get("/open/runs", headers=auth).get_json()["data"]
    for run in listing:  # the single-run endpoint shows the same Run
        assert client.get(f"/open/runs/{run['id']}", headers=auth).get_json()["data"] == run
    raw = sorted(map(logical_row, ShadowRun.select().dicts()), key=itemgetter("idempotency_key"))
    failures = list(ShadowFailure.select().order_by(ShadowFailure.id).dicts())
    return listing, raw, failures


def kinds(run: dict) -> list:
    return [event["kind"] for event in run["events"]]


def assert_same_as_shadow_off(legacy_twin, steps, answers):
    """Answers are the Shadow-off bytes and the Legacy rows are the Shadow-off rows."""
    twin_answers, twin_legacy = legacy_twin(steps)
    assert answers == twin_answers == [OK] * len(answers)
    assert legacy_rows() == twin_legacy


def test_a_finish_after_a_lost_start_response_closes_the_same_run(client, auth, legacy_twin):
    answers = play(client, auth, [create(), start()])
    running, raw_running, _ = shadow_view(client, auth)
    answers += play(client, auth, [finish()])

    runs, raw, failures = shadow_view(client, auth)
    assert [r["id"] for r in running] == [r["id"] for r in runs] == [RUN_ID]
    assert kinds(running[0]) == ["accepted", "spawned", "running"]
    assert raw_running[0]["state"] == "running"
    run = runs[0]
    assert kinds(run) == ["accepted", "spawned", "running", "exited"]
    assert [e["seq"] for e in run["events"]] == [1, 2, 3, 4]
    assert {(e["run_id"], e["attempt_id"]) for e in run["events"]} == {(RUN_ID, ATTEMPT_ID)}
    assert {k: run[k] for k in (
        "project_id", "idempotency_key", "request_id", "task_identity", "cron_id",
        "task_revision", "origin", "trigger_type", "triggered_by", "execution_owner",
        "accepted_at", "scheduled_at", "state", "exit_code")} == {
        "project_id": "default", "idempotency_key": EXECUTION_ID, "request_id": EXECUTION_ID,
        "task_identity": "legacy-cron:1", "cron_id": 1, "task_revision": REVISION,
        "origin": "scheduled_system", "trigger_type": "scheduled_system",
        "triggered_by": "legacy:system-crond", "execution_owner": "legacy",
        "accepted_at": 1764460800, "scheduled_at": 1764460800, "state": "exited",
        "exit_code": 0}
    attempt = run["attempt"]
    assert {k: attempt[k] for k in ("id", "run_id", "number", "state", "pid", "log_path",
                                    "started_at", "exit_code")} == {
        "id": ATTEMPT_ID, "run_id": RUN_ID, "number": 1, "state": "exited", "pid": 4242,
        "log_path": LOG, "started_at": 1764460800, "exit_code": 0}
    assert attempt["exited_at"] == run["finished_at"] is not None
    assert [(r["id"], r["attempt_id"], r["state"], r["events"].count("@")) for r in raw] == [
        (RUN_ID, ATTEMPT_ID, "exited", 4)]
    assert failures == []
    legacy = legacy_rows()
    assert (legacy["crons"][0]["status"], legacy["crons"][0]["last_running_time"]) == (1, 7)
    assert [(i["status"], i["exit_code"], i["finished_at"]) for i in legacy["instances"]] == [
        (1, 0, True)]
    assert_same_as_shadow_off(legacy_twin, [create(), start(), finish()], answers)


def test_a_finish_without_a_start_creates_a_run_closed_at_once(client, auth, legacy_twin):
    steps = [create(), finish(exit_code=3)]
    answers = play(client, auth, steps)

    runs, raw, failures = shadow_view(client, auth)
    assert [(r["id"], r["state"], r["exit_code"], kinds(r)) for r in runs] == [
        (RUN_ID, "exited", 3, ["accepted", "spawned", "exited"])]
    assert runs[0]["attempt"]["id"] == ATTEMPT_ID
    assert [(r["state"], r["events"].count("@")) for r in raw] == [("exited", 3)]
    assert failures == []
    legacy = legacy_rows()
    assert legacy["crons"][0]["status"] == 1
    assert legacy["instances"] == []  # no running callback, no Legacy instance (2.x)
    assert_same_as_shadow_off(legacy_twin, steps, answers)


def test_a_resent_finish_is_an_exact_replay(client, auth, legacy_twin):
    answers = play(client, auth, [create(), start(), finish()])
    _, before, _ = shadow_view(client, auth)
    answers += play(client, auth, [finish(), finish(exit_code=9)])

    runs, raw, failures = shadow_view(client, auth)
    assert raw == before  # not one column touched, recorded_at included
    assert [(r["state"], r["exit_code"], len(r["events"])) for r in runs] == [("exited", 0, 4)]
    assert failures == []
    assert_same_as_shadow_off(
        legacy_twin, [create(), start(), finish(), finish(), finish(exit_code=9)], answers)


def test_a_late_start_after_the_finish_changes_nothing(client, auth, legacy_twin):
    answers = play(client, auth, [create(), finish()])
    _, before, _ = shadow_view(client, auth)
    answers += play(client, auth, [start()])

    runs, raw, failures = shadow_view(client, auth)
    assert raw == before
    assert [(r["state"], kinds(r)) for r in runs] == [
        ("exited", ["accepted", "spawned", "exited"])]
    assert failures == []
    # Legacy still does what 2.x did with a late running callback: the cron shows running.
    assert legacy_rows()["crons"][0]["status"] == 0
    assert_same_as_shadow_off(legacy_twin, [create(), finish(), start()], answers)


def test_an_edited_cron_between_callbacks_is_replay_drift_on_task_revision(
        client, auth, legacy_twin):
    steps = [create(), start(), edit(command="task backup.sh --full"), finish()]
    answers = play(client, auth, steps)

    runs, raw, failures = shadow_view(client, auth)
    assert [(r["id"], r["state"], r["task_revision"], kinds(r)) for r in runs] == [
        (RUN_ID, "running", REVISION, ["accepted", "spawned", "running"])]
    assert len(raw) == 1
    assert [(f["reason"], f["request_id"], f["cron_id"]) for f in failures] == [
        ("replay_drift", EXECUTION_ID, 1)]
    assert "task_revision" in failures[0]["detail"]
    assert "cron_id" not in failures[0]["detail"]
    legacy = legacy_rows()  # Legacy unaffected: the finish closed the cron and its instance
    assert legacy["crons"][0]["status"] == 1
    assert [(i["status"], i["finished_at"]) for i in legacy["instances"]] == [(1, True)]
    assert_same_as_shadow_off(legacy_twin, steps, answers)


def test_the_same_id_sent_for_another_cron_is_replay_drift_on_cron_id(
        client, auth, legacy_twin):
    # Two crons with one definition: only the cron id differs, so only it may drift.
    steps = [create(), create(), start(cron_id=1), finish(cron_id=2)]
    answers = play(client, auth, steps)

    runs, raw, failures = shadow_view(client, auth)
    assert [(r["cron_id"], r["state"]) for r in runs] == [(1, "running")]
    assert len(raw) == 1
    assert [(f["reason"], f["request_id"], f["cron_id"]) for f in failures] == [
        ("replay_drift", EXECUTION_ID, 2)]
    assert "cron_id" in failures[0]["detail"]
    assert "task_revision" not in failures[0]["detail"]
    assert_same_as_shadow_off(legacy_twin, steps, answers)


def test_callbacks_without_an_execution_id_create_no_run(client, auth, legacy_twin):
    steps = [create(), start(execution_id=None), finish(execution_id=None)]
    answers = play(client, auth, steps)

    assert shadow_view(client, auth) == ([], [], [])
    legacy = legacy_rows()
    assert legacy["crons"][0]["status"] == 1
    assert [(i["status"], i["exit_code"]) for i in legacy["instances"]] == [(1, 0)]
    assert_same_as_shadow_off(legacy_twin, steps, answers)


def test_callbacks_with_an_invalid_execution_id_create_no_run(client, auth, legacy_twin):
    invalid = EXECUTION_ID.upper()
    steps = [create(), start(execution_id=invalid), finish(execution_id=invalid)]
    answers = play(client, auth, steps)

    runs, raw, failures = shadow_view(client, auth)
    assert (runs, raw) == ([], [])
    assert [f["reason"] for f in failures] == ["invalid_execution_id"] * 2
    assert [(i["status"], i["exit_code"]) for i in legacy_rows()["instances"]] == [(1, 0)]
    assert_same_as_shadow_off(legacy_twin, steps, answers)


@pytest.mark.parametrize("shadow_env", [{}, {"QL3_SHADOW_ORIGINS": "manual,scheduled_node"}],
                         ids=["off", "other-origins"])
def test_callbacks_with_a_valid_id_create_no_run_when_shadow_is_off(client, auth, legacy_twin):
    steps = [create(), start(), finish()]
    answers = play(client, auth, steps)

    assert shadow_view(client, auth) == ([], [], [])
    assert [(i["status"], i["exit_code"]) for i in legacy_rows()["instances"]] == [(1, 0)]
    assert_same_as_shadow_off(legacy_twin, steps, answers)


# --- with Shadow off, an execution_id costs nothing --------------------------------------

def sqlite_statements(client, auth, step) -> list:
    """Every SQL statement SQLite executes while the app handles one request."""
    statements = []
    db.ensure_connection()
    connection = db.database.connection()
    connection.set_trace_callback(statements.append)
    try:
        play(client, auth, [step])
    finally:
        connection.set_trace_callback(None)
    return statements


def peewee_queries(client, auth, step) -> list:
    """Every query Peewee sends (its debug log) while the app handles one request."""
    queries = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: queries.append(record.msg)
    logger = logging.getLogger("peewee")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        play(client, auth, [step])
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return queries


@pytest.mark.parametrize("shadow_env", [{}], ids=["off"])
@pytest.mark.parametrize("backend", ["sqlite"])
def test_with_shadow_off_an_execution_id_adds_no_sql_statement(client, auth):
    play(client, auth, [create(), start(execution_id=None)])  # warms the token cache
    without_id = sqlite_statements(client, auth, start(execution_id=None))
    with_id = sqlite_statements(client, auth, start())
    assert any(s.startswith("UPDATE") for s in without_id)
    assert with_id == without_id


@pytest.mark.parametrize("backend", ["sqlite"])
def test_with_shadow_on_the_statement_trace_shows_the_shadow_write(client, auth):
    play(client, auth, [create(), start(execution_id=None)])
    without_id = sqlite_statements(client, auth, start(execution_id=None))
    with_id = sqlite_statements(client, auth, start())
    assert len(with_id) > len(without_id)
    assert any("shadow_runs" in s for s in with_id)


@pytest.mark.parametrize("shadow_env", [{}], ids=["off"])
def test_with_shadow_off_an_execution_id_adds_no_query_on_either_backend(client, auth):
    play(client, auth, [create(), start(execution_id=None)])
    without_id = peewee_queries(client, auth, start(execution_id=None))
    with_id = peewee_queries(client, auth, start())
    assert len(without_id) >= 2  # the cron update (returning the definition), the instance insert
    assert with_id == without_id
