"""Alert tuning (docs/ALERTS.md, "Tuning"): alert_after, snooze, quiet hours and max_runtime,
judged where events are queued (alerts.queue_events) so every sender applies them alike;
real ticks with `now`, a real loopback receiver, both databases."""
from __future__ import annotations

import json
import time

import pytest

from qlshadow.core.schedule import in_quiet, quiet_between
from qlshadow.storage import db, schema
from qlshadow.storage.models import AlertEvent, Cron
from qlshadow.watch import alerts, health
from helpers import cli_env, run_cli, table_rows
from old_schema import database_at
from test_alerts import channels_of, run, tick, titles


def local(days: int, hour: int, minute: int = 0) -> int:
    """Epoch seconds of the box's local hour:minute, `days` days after today."""
    day = time.localtime()
    return int(time.mktime((day.tm_year, day.tm_mon, day.tm_mday + days, hour, minute, 0,
                            0, 0, -1)))


def statuses() -> list:
    return [(e["state"], e["status"]) for e in table_rows(AlertEvent)]


def snooze(client, auth, cron_id, until):
    return client.post(f"/open/crons/{cron_id}/snooze", json={"until": until}, headers=auth)


# --- alert_after ----------------------------------------------------------------------------

def test_alert_after_3_sends_the_failed_alert_at_the_third_failure_only(
        settings, client, auth, make_cron, receiver):
    cron = make_cron(name="backup", schedule="@once", alert_after=3)
    channels, now = channels_of(receiver), int(time.time())
    for n in range(2):
        run(client, auth, cron["id"], 2, pid=10 + n)
        assert tick(settings, channels, now + 60 * n)["sent"] == 0
    assert receiver.requests == []
    assert statuses() == [("failed", 0)]  # held: still new
    run(client, auth, cron["id"], 2, pid=12)
    assert tick(settings, channels, now + 120)["sent"] == 1
    for later in range(3, 6):
        run(client, auth, cron["id"], 2, pid=10 + later)
        assert tick(settings, channels, now + 60 * later)["sent"] == 0
    run(client, auth, cron["id"], 0, pid=20)
    tick(settings, channels, now + 400)
    assert titles(receiver) == ["qlshadow: backup failed", "qlshadow: backup is ok again"]
    assert b"It has failed 3 times in a row (its alert_after)." in receiver.requests[0]["body"]


def test_failures_that_recover_before_alert_after_send_nothing_not_even_the_recovery(
        settings, client, auth, make_cron, receiver):
    cron = make_cron(schedule="@once", alert_after=3)
    channels, now = channels_of(receiver), int(time.time())
    run(client, auth, cron["id"], 1, pid=1)
    tick(settings, channels, now)
    run(client, auth, cron["id"], 1, pid=2)
    run(client, auth, cron["id"], 0, pid=3)
    run(client, auth, cron["id"], 1, pid=4)  # the streak starts again: one failure
    tick(settings, channels, now + 60)
    assert receiver.requests == []
    assert statuses() == [("failed", 3), ("ok", 3), ("failed", 0)]
    with db.database.connection_context():
        assert alerts.notify_log()[-1]["outcome"] == "held_back"


# --- snooze --------------------------------------------------------------------------------

def test_a_snoozed_cron_sends_nothing_until_its_end_then_once_if_still_failing(
        settings, client, auth, make_cron, receiver):
    cron = make_cron(name="backup", schedule="@once")
    now = int(time.time())
    answer = snooze(client, auth, cron["id"], now + 3600)
    assert answer.status_code == 200
    assert answer.get_json()["data"] == {"id": cron["id"], "name": "backup",
                                         "snooze_until": now + 3600}
    run(client, auth, cron["id"], 2)
    channels = channels_of(receiver)
    for at in (now, now + 600, now + 3599):
        assert tick(settings, channels, at)["sent"] == 0
    # still judged and shown, marked
    found = client.get("/open/crons/health", headers=auth).get_json()["data"][0]
    assert (found["state"], found["snoozed_until"], found["quiet"]) == ("failed", now + 3600,
                                                                         False)
    assert receiver.requests == []
    assert tick(settings, channels, now + 3601)["sent"] == 1
    assert tick(settings, channels, now + 3700)["sent"] == 0
    assert titles(receiver) == ["qlshadow: backup failed"]


def test_a_failure_that_recovered_during_the_snooze_sends_nothing(
        settings, client, auth, make_cron, receiver):
    cron = make_cron(schedule="@once")
    now = int(time.time())
    snooze(client, auth, cron["id"], now + 3600)
    run(client, auth, cron["id"], 2, pid=1)
    run(client, auth, cron["id"], 0, pid=2)
    channels = channels_of(receiver)
    tick(settings, channels, now + 60)
    tick(settings, channels, now + 3601)
    tick(settings, channels, now + 3700)
    assert receiver.requests == []
    assert statuses() == [("failed", 3), ("ok", 3)]


def test_a_recovery_during_the_snooze_of_an_alerted_failure_is_sent_at_its_end(
        settings, client, auth, make_cron, receiver):
    cron = make_cron(name="backup", schedule="@once")
    channels, now = channels_of(receiver), int(time.time())
    run(client, auth, cron["id"], 2, pid=1)
    tick(settings, channels, now)
    snooze(client, auth, cron["id"], now + 3600)
    run(client, auth, cron["id"], 0, pid=2)
    tick(settings, channels, now + 60)
    assert titles(receiver) == ["qlshadow: backup failed"]
    tick(settings, channels, now + 3601)
    assert titles(receiver) == ["qlshadow: backup failed", "qlshadow: backup is ok again"]


def test_until_null_ends_the_snooze_and_what_it_held_is_judged_then(
        settings, client, auth, make_cron, receiver):
    cron = make_cron(schedule="@once")
    channels, now = channels_of(receiver), int(time.time())
    snooze(client, auth, cron["id"], now + 86400)
    run(client, auth, cron["id"], 2, pid=1)
    run(client, auth, cron["id"], 0, pid=2)  # recovered while snoozed: nothing to tell
    run(client, auth, cron["id"], 3, pid=3)  # failing again: told once the snooze ends
    tick(settings, channels, now + 30)
    assert receiver.requests == []
    ended = snooze(client, auth, cron["id"], None)
    assert ended.status_code == 200 and ended.get_json()["data"]["snooze_until"] is None
    assert client.get(f"/open/crons/{cron['id']}", headers=auth).get_json()["data"][
        "snooze_until"] is None
    tick(settings, channels, int(time.time()) + 1)
    assert len(receiver.requests) == 1
    assert statuses() == [("failed", 3), ("ok", 3), ("failed", 1)]


def test_snooze_refuses_a_bad_body_with_one_sentence_and_changes_nothing(
        client, auth, make_cron):
    cron = make_cron(schedule="@once")
    for body in ({}, {"until": "tomorrow"}, {"until": -1}, {"until": 2**40}, {"until": 1.5},
                 [1]):
        answer = client.post(f"/open/crons/{cron['id']}/snooze", json=body, headers=auth)
        assert answer.status_code == 400, body
        assert answer.get_json()["message"].count(".") >= 1
    assert snooze(client, auth, 999, None).status_code == 404
    assert table_rows(Cron)[0]["snooze_until"] is None


def test_snooze_takes_iso_text(client, auth, make_cron):
    cron = make_cron(schedule="@once")
    answer = snooze(client, auth, cron["id"], "2037-01-02T03:04:05Z")
    assert answer.get_json()["data"]["snooze_until"] == 2114478245


# --- quiet hours -----------------------------------------------------------------------------

def test_quiet_hours_wrap_midnight():
    window = "23:00-07:00"
    assert in_quiet(window, local(1, 23, 30)) and in_quiet(window, local(2, 0, 30))
    assert in_quiet(window, local(2, 6, 59)) and not in_quiet(window, local(2, 7, 0))
    assert not in_quiet(window, local(1, 12, 0)) and not in_quiet(window, local(1, 22, 59))
    assert in_quiet("09:00-17:00", local(1, 9, 0)) and not in_quiet("09:00-17:00", local(1, 17))
    assert quiet_between(window, local(1, 12), local(1, 23, 1))
    assert not quiet_between(window, local(1, 8), local(1, 22, 59))


def test_a_quiet_cron_sends_at_the_end_of_its_quiet_hours_across_midnight(
        settings, client, auth, make_cron, receiver):
    cron = make_cron(name="backup", schedule="@once", quiet="23:00-07:00")
    run(client, auth, cron["id"], 2)
    channels = channels_of(receiver)
    for at in (local(1, 23, 30), local(2, 0, 30), local(2, 6, 59)):
        assert tick(settings, channels, at)["sent"] == 0
    with db.database.connection_context():
        [found] = health.read_all(local(2, 3), shadow=settings.shadow_on)
    assert (found["state"], found["quiet"]) == ("failed", True)
    assert health.alert_mark_text(found) == "quiet"
    assert receiver.requests == []
    assert tick(settings, channels, local(2, 7, 1))["sent"] == 1
    assert tick(settings, channels, local(2, 8))["sent"] == 0
    assert titles(receiver) == ["qlshadow: backup failed"]


def test_outside_its_quiet_hours_a_cron_alerts_at_once(
        settings, client, auth, make_cron, receiver):
    cron = make_cron(schedule="@once", quiet="23:00-07:00")
    run(client, auth, cron["id"], 2)
    assert tick(settings, channels_of(receiver), local(1, 12))["sent"] == 1


# --- max_runtime -----------------------------------------------------------------------------

def test_max_runtime_makes_a_running_execution_stuck_after_it(client, auth, make_cron):
    limited = make_cron(name="limited", schedule="@once", max_runtime=120)
    usual = make_cron(name="usual", schedule="@once")
    now = int(time.time())
    for cron in (limited, usual):
        client.put("/open/crons/status", headers=auth, json={
            "ids": [cron["id"]], "status": 0, "pid": 5, "log_path": "x.log",
            "last_execution_time": now - 300})
    with db.database.connection_context():
        states = {h["name"]: h for h in health.read_all(now)}
        before = {h["name"]: h["state"] for h in health.read_all(now - 200)}
    assert states["limited"]["state"] == "stuck" and "max_runtime" in states["limited"]["reason"]
    assert states["limited"]["since"] == now - 300 + 120
    assert states["usual"]["state"] == "running"
    assert before == {"limited": "running", "usual": "running"}


# --- the API's fields -----------------------------------------------------------------------

@pytest.mark.parametrize("field,value", [
    ("alert_after", 0), ("alert_after", 1001), ("alert_after", "3"), ("alert_after", True),
    ("max_runtime", 0), ("max_runtime", 31 * 86400 + 1), ("max_runtime", 1.5),
    ("quiet", "25:00-01:00"), ("quiet", "07:00-07:00"), ("quiet", "7:00-9:00"),
    ("quiet", "23:00"), ("quiet", 2300)])
def test_bad_tuning_is_a_400_naming_the_field_and_nothing_is_written(
        client, auth, make_cron, field, value):
    body = {"name": "x", "command": "true", "schedule": "@once", field: value}
    answer = client.post("/open/crons", json=body, headers=auth)
    assert answer.status_code == 400
    message = answer.get_json()["message"]
    assert f"'{field}'" in message and message.endswith(".") and message.count(". ") == 0
    assert table_rows(Cron) == []
    cron = make_cron(schedule="@once")
    answer = client.put("/open/crons", json={"id": cron["id"], field: value}, headers=auth)
    assert answer.status_code == 400


def test_tuning_is_shown_and_changes_neither_updated_at_nor_the_definition(
        client, auth, make_cron):
    from qlshadow.storage.models import DEFINITION_FIELDS
    cron = make_cron(schedule="@once")
    assert (cron["alert_after"], cron["max_runtime"], cron["quiet"], cron["snooze_until"]) == (
        None, None, None, None)
    assert not {"alert_after", "max_runtime", "quiet", "snooze_until"} & set(DEFINITION_FIELDS)
    answer = client.put("/open/crons", headers=auth, json={
        "id": cron["id"], "alert_after": 3, "max_runtime": 600, "quiet": "22:30-06:00"})
    changed = answer.get_json()["data"]
    assert (changed["alert_after"], changed["max_runtime"], changed["quiet"]) == (
        3, 600, "22:30-06:00")
    assert changed["updatedAt"] == cron["updatedAt"]
    shown = client.get(f"/open/crons/{cron['id']}", headers=auth).get_json()["data"]
    assert shown == changed


# --- the CLI ---------------------------------------------------------------------------------

def test_cli_snooze_by_name_for_a_while_and_off(settings, make_cron):
    make_cron(name="backup", schedule="@once")
    env = cli_env(settings)
    out = run_cli(env, "snooze", "backup", "--for", "2h", "--json").stdout
    [done] = json.loads(out)
    assert done["name"] == "backup" and 7100 < done["snooze_until"] - time.time() <= 7200
    assert "not snoozed" in run_cli(env, "snooze", "1", "--off").stdout
    bad = run_cli(env, "snooze", "nightly", "--for", "2h", check=False)
    assert bad.returncode == 1 and "no cron is named 'nightly'" in bad.stderr
    edited = run_cli(env, "cron", "edit", "1", "--alert-after", "3", "--quiet", "23:00-07:00",
                     "--max-runtime", "30m", "--json").stdout
    assert {k: json.loads(edited)[k] for k in ("alert_after", "quiet", "max_runtime")} == {
        "alert_after": 3, "quiet": "23:00-07:00", "max_runtime": 1800}
    usage = run_cli(env, "cron", "edit", "1", "--quiet", "7-9", check=False)
    assert usage.returncode == 2 and "--quiet: '7-9' is not quiet hours" in usage.stderr


# --- the schema step -------------------------------------------------------------------------

def test_the_upgrade_keeps_every_cron_with_its_tuning_empty(make_settings):
    settings = make_settings()
    step = [name for name, _ in schema.STEPS].index("add the crons' alert tuning columns")
    database = database_at(settings.db_url, step)  # the version before the step
    with database.connection_context():
        assert "alert_after" not in {c.name for c in database.get_columns("crons")}
    with database.connection_context(), database.atomic():
        for n in range(3):
            Cron.insert(name=f"c{n}", command="true", schedule="@once", created_at=n,
                        updated_at=n).execute()
        before = sorted(Cron.select(Cron.id, Cron.name, Cron.updated_at).tuples())
    run_cli(cli_env(settings), "db", "init")
    db.bind(database)
    with database.connection_context():
        rows = list(Cron.select().order_by(Cron.id).dicts())
    assert sorted((r["id"], r["name"], r["updated_at"]) for r in rows) == before
    assert {(r["alert_after"], r["max_runtime"], r["quiet"], r["snooze_until"])
            for r in rows} == {(None, None, None, None)}


# --- the marks on the page and in `qlshadow status` ------------------------------------------

def test_the_page_and_status_mark_a_snoozed_cron(settings, client, auth, make_cron):
    from qlshadow.core.auth import create_app_record
    cron = make_cron(name="backup", schedule="@once")
    run(client, auth, cron["id"], 2)
    snooze(client, auth, cron["id"], int(time.time()) + 3600)
    with db.database.connection_context(), db.write_transaction():
        viewer = create_app_record("viewer", ["crons", "runs"])
    client.post("/page/login", data={"client_id": viewer[0], "client_secret": viewer[1]})
    for path in ("/page/", f"/page/crons/{cron['id']}"):
        page = client.get(path)
        assert page.status_code == 200 and "(snoozed until " in page.get_data(as_text=True), path
    out = run_cli(cli_env(settings), "status").stdout
    assert "failed (snoozed until " in out
