"""Fail open (CONTRACT.md §3.8): a database error inside the Shadow write never costs the
Legacy write.

The error is real: a trigger on shadow_runs that raises, on SQLite and on PostgreSQL.
"""
from __future__ import annotations

import pytest

from qlshadow.storage import db
from qlshadow.storage.models import ShadowFailure, ShadowRun
from qlshadow.core.shadow.reader import logical_row
from helpers import SHADOW_ON, STATUS_PATH, legacy_rows, play

EXECUTION_ID = "legacy-system:1764460800:3f2b8c1e-9d4a-4e6b-8f1a-2c3d4e5f6a7b"
CRON = ("POST", "/open/crons", {"name": "backup", "command": "task backup.sh",
                                "schedule": "*/5 * * * *"})


def callback(status: int) -> tuple:
    return ("PUT", STATUS_PATH, {
        "ids": [1], "status": status, "pid": 4242, "log_path": "backup/1.log",
        "last_execution_time": 1764460800, "last_running_time": 7, "exit_code": 0,
        "execution_id": EXECUTION_ID})


def install_failing_trigger(operation: str, message: str) -> None:
    """A trigger that makes every `operation` (INSERT or UPDATE) on shadow_runs fail."""
    database = db.database.obj
    db.ensure_connection()
    with database.atomic():
        if db.is_sqlite(database):
            database.execute_sql(
                f"CREATE TRIGGER shadow_runs_fail BEFORE {operation} ON shadow_runs "
                f"BEGIN SELECT RAISE(ABORT, '{message}'); END")
        else:
            database.execute_sql(
                "CREATE FUNCTION shadow_runs_fail() RETURNS trigger LANGUAGE plpgsql AS "
                f"$$ BEGIN RAISE EXCEPTION '{message}'; END $$")
            database.execute_sql(
                f"CREATE TRIGGER shadow_runs_fail BEFORE {operation} ON shadow_runs "
                "FOR EACH ROW EXECUTE FUNCTION shadow_runs_fail()")


def failure_rows() -> list:
    return list(ShadowFailure.select().order_by(ShadowFailure.id).dicts())


@pytest.mark.parametrize("shadow_env", [SHADOW_ON])
def test_a_failing_insert_fails_open_and_records_writer_error(client, auth, legacy_twin):
    play(client, auth, [CRON])
    install_failing_trigger("INSERT", "injected shadow failure")
    answers = play(client, auth, [callback(1)])

    twin_answers, twin_legacy = legacy_twin([CRON, callback(1)])
    assert answers == twin_answers == [b'{"code":200}\n']
    assert legacy_rows() == twin_legacy
    assert legacy_rows()["crons"][0]["status"] == 1  # the Legacy write committed
    assert ShadowRun.select().count() == 0
    rows = failure_rows()
    assert [(f["reason"], f["request_id"], f["cron_id"]) for f in rows] == [
        ("writer_error", EXECUTION_ID, 1)]
    assert "injected shadow failure" in rows[0]["detail"]


@pytest.mark.parametrize("shadow_env", [SHADOW_ON])
def test_a_failing_state_change_keeps_the_run_as_it_was(client, auth, legacy_twin):
    play(client, auth, [CRON, callback(0)])
    install_failing_trigger("UPDATE", "injected shadow failure")
    answers = play(client, auth, [callback(1)])

    twin_answers, twin_legacy = legacy_twin([CRON, callback(0), callback(1)])
    assert answers == twin_answers[1:]
    assert legacy_rows() == twin_legacy
    assert [(logical_row(r)["state"], logical_row(r)["events"].count("@"))
            for r in ShadowRun.select().dicts()] == [
        ("running", 3)]
    assert [f["reason"] for f in failure_rows()] == ["writer_error"]


@pytest.mark.parametrize("shadow_env", [SHADOW_ON])
def test_a_long_database_message_is_cut_to_500_characters(client, auth):
    play(client, auth, [CRON])
    install_failing_trigger("INSERT", "x" * 600)
    play(client, auth, [callback(1)])
    rows = failure_rows()
    assert [f["reason"] for f in rows] == ["writer_error"]
    assert len(rows[0]["detail"]) == 500


@pytest.mark.parametrize("shadow_env", [dict(SHADOW_ON, QL3_SHADOW_FAILURE_CAP="0")])
def test_with_a_cap_of_zero_nothing_is_recorded_and_legacy_still_commits(
        client, auth, legacy_twin):
    play(client, auth, [CRON])
    install_failing_trigger("INSERT", "injected shadow failure")
    answers = play(client, auth, [callback(0), callback(1)])

    twin_answers, twin_legacy = legacy_twin([CRON, callback(0), callback(1)])
    assert answers == twin_answers
    assert legacy_rows() == twin_legacy
    assert [(i["status"], i["finished_at"]) for i in legacy_rows()["instances"]] == [(1, True)]
    assert (ShadowRun.select().count(), failure_rows()) == (0, [])
