"""The health state per cron (qlshadow.watch.health), GET /open/crons/health and `qlshadow status`.

Histories are built through the status callback, as task.sh sends it, and then dated: a
callback's finish is stamped with the server's clock, so each execution's finished_at is
set afterwards to the duration the test wants.
"""
from __future__ import annotations

import json
import time

import pytest

from qlshadow.storage import db
from qlshadow.watch import health
from qlshadow.core.auth import create_app_record, issue_token
from qlshadow.storage.models import App, Cron, RunningInstance, ShadowRun
from helpers import STATUS_PATH, cli_env, run_cli
from reconcile_history import execution_id, fire, new_cron

BASE = 1764460800  # 2025-11-30 00:00 UTC: a multiple of every interval used here


# Histories below are laid out in UTC minutes (a test may set its own zone inside).
pytestmark = [pytest.mark.shadow_on, pytest.mark.usefixtures("utc_box")]


def run(client, auth, cron_id: int, start: int, duration: int | None = 1, exit_code: int = 0,
        scheduled: bool = True, pid: int | None = None) -> None:
    """One execution: the running callback, then (unless duration is None) the finish."""
    pid = pid or 1000 + (start // 60) % 30000
    body = {"ids": [cron_id], "status": 0, "pid": pid, "log_path": f"job/{start}-{pid}.log",
            "last_execution_time": start}
    if scheduled:
        body["execution_id"] = execution_id(start)
    assert client.put(STATUS_PATH, json=body, headers=auth).status_code == 200
    if duration is None:
        return
    body.update(status=1, last_running_time=duration, exit_code=exit_code)
    assert client.put(STATUS_PATH, json=body, headers=auth).status_code == 200
    with db.connected(), db.write_transaction():
        RunningInstance.update(finished_at=start + duration).where(
            RunningInstance.cron == cron_id, RunningInstance.started_at == start).execute()
        ShadowRun.update(finished_at=start + duration).where(
            ShadowRun.cron_id == cron_id, ShadowRun.accepted_at == start).execute()


def state_of(cron_id: int, now: int, shadow: bool = True) -> dict:
    with db.connected():
        found = [h for h in health.read_all(now, shadow=shadow) if h["cron_id"] == cron_id]
    assert len(found) == 1
    return found[0]


def every_ten(client, auth, cron_id: int, first: int, last: int, **kw) -> None:
    for at in range(first, last + 1, 600):
        run(client, auth, cron_id, at + 1, **kw)


# --- each state from a constructed history -------------------------------------------------

def test_a_cron_with_no_firing_due_yet_is_new(client, auth):
    cron_id = new_cron(client, auth, "*/10 * * * *", BASE - 30)
    h = state_of(cron_id, BASE + 30)  # the firing at BASE: its minute has not ended
    assert (h["state"], h["since"]) == ("new", BASE - 30)
    assert h["last_start"] is None and h["last_success"] is None
    assert h["next_expected"] == BASE + 600 and h["grace"] == 60


def test_a_firing_without_a_record_is_missed_once_its_grace_after_the_firing_ran_out(
        client, auth):
    cron_id = new_cron(client, auth, "*/10 * * * *", BASE - 3600)
    every_ten(client, auth, cron_id, BASE - 3000, BASE - 600)
    assert state_of(cron_id, BASE + 59)["state"] == "ok"  # still the firing's own minute
    # The grace (60 s) counts from the firing, not from the end of its minute: the tick of
    # the next minute tells it (grace + 60 s after the firing at the latest).
    missed = state_of(cron_id, BASE + 60)
    assert (missed["state"], missed["since"]) == ("missed", BASE + 60)
    assert "crond did not start it" in missed["reason"]
    # Three firings later it is still missed, since the first one that has no record.
    assert state_of(cron_id, BASE + 1900)["since"] == BASE + 60


def test_a_cron_that_never_ran_at_all_is_missed_once_a_firing_passed_grace(client, auth):
    cron_id = new_cron(client, auth, "0 * * * *", BASE - 7200 - 30)
    h = state_of(cron_id, BASE + 10)
    assert h["grace"] == 360 and h["last_start"] is None
    assert (h["state"], h["since"]) == ("missed", BASE - 7200 + 360)


def test_a_failed_execution_makes_the_cron_failed_until_one_succeeds(client, auth):
    cron_id = new_cron(client, auth, "*/10 * * * *", BASE - 3600)
    every_ten(client, auth, cron_id, BASE - 3000, BASE - 1200)
    run(client, auth, cron_id, BASE - 600 + 1, duration=5, exit_code=2)
    run(client, auth, cron_id, BASE + 1, duration=5, exit_code=3)
    h = state_of(cron_id, BASE + 100)
    assert (h["state"], h["since"]) == ("failed", BASE - 600 + 6)  # the first of the streak
    assert "exited with code 3" in h["reason"]
    assert h["last_success"] == BASE - 1200 + 2 and h["last_start"] == BASE + 1
    run(client, auth, cron_id, BASE + 600 + 1, duration=5)
    h = state_of(cron_id, BASE + 700)
    assert (h["state"], h["since"], h["last_success"]) == ("ok", BASE + 606, BASE + 606)


def test_a_run_longer_than_three_times_its_median_is_stuck(client, auth):
    cron_id = new_cron(client, auth, "0 * * * *", BASE - 5 * 3600)
    for hour in range(4, 0, -1):
        run(client, auth, cron_id, BASE - hour * 3600 + 1, duration=200)
    run(client, auth, cron_id, BASE + 1, duration=None)
    running = state_of(cron_id, BASE + 500)
    assert (running["state"], running["since"]) == ("running", BASE + 1)
    stuck = state_of(cron_id, BASE + 1 + 601)  # limit: max(3 x 200, grace 360) = 600 s
    assert (stuck["state"], stuck["since"]) == ("stuck", BASE + 601)
    assert "3 x its median run of 200 s" in stuck["reason"]


def test_without_enough_runs_to_tell_a_run_is_stuck_after_an_hour(client, auth):
    cron_id = new_cron(client, auth, "@boot", BASE - 3600)
    run(client, auth, cron_id, BASE + 1, duration=None, scheduled=False)
    assert state_of(cron_id, BASE + 3601)["state"] == "running"
    assert state_of(cron_id, BASE + 3602)["state"] == "stuck"


def test_a_finish_lost_before_a_newer_execution_does_not_keep_the_cron_running(client, auth):
    cron_id = new_cron(client, auth, "*/10 * * * *", BASE - 3600)
    run(client, auth, cron_id, BASE - 1200 + 1, duration=None)  # its finish never arrived
    every_ten(client, auth, cron_id, BASE - 600, BASE)
    assert state_of(cron_id, BASE + 100)["state"] == "ok"


def test_a_disabled_cron_is_paused_and_expects_nothing(client, auth):
    cron_id = new_cron(client, auth, "*/10 * * * *", BASE - 3600)
    assert client.put("/open/crons/disable", json=[cron_id], headers=auth).status_code == 200
    h = state_of(cron_id, BASE + 5000)
    assert h["state"] == "paused" and h["next_expected"] is None


def test_a_missed_cron_recovers_with_its_next_record(client, auth):
    cron_id = new_cron(client, auth, "*/10 * * * *", BASE - 3600)
    every_ten(client, auth, cron_id, BASE - 3000, BASE - 1200)
    assert state_of(cron_id, BASE - 300)["state"] == "missed"
    run(client, auth, cron_id, BASE + 2)
    assert state_of(cron_id, BASE + 100)["state"] == "ok"


def test_a_manual_run_between_firings_does_not_stand_for_a_missed_firing(client, auth):
    cron_id = new_cron(client, auth, "*/10 * * * *", BASE - 3600)
    every_ten(client, auth, cron_id, BASE - 3000, BASE - 600)
    run(client, auth, cron_id, BASE + 65, scheduled=False, exit_code=1)  # no execution id
    h = state_of(cron_id, BASE + 200)
    assert h["state"] == "missed" and h["last_start"] == BASE + 65
    # Shadow off: nothing tells a manual run from crond's, so any record in grace counts.
    assert state_of(cron_id, BASE + 200, shadow=False)["state"] == "failed"


def test_a_failed_manual_run_says_so(client, auth):
    cron_id = new_cron(client, auth, "@once", BASE - 3600)
    run(client, auth, cron_id, BASE + 1, scheduled=False, exit_code=127)
    h = state_of(cron_id, BASE + 100)
    assert h["state"] == "failed" and "(a manual run)" in h["reason"]
    assert "code 127" in h["reason"] and h["next_expected"] is None


@pytest.mark.parametrize("schedule", ["@once", "@boot", "*/30 * * * * *", "0 0 31 2 *"])
def test_crons_crond_never_starts_get_their_state_from_history_only(client, auth, schedule):
    never = schedule == "0 0 31 2 *"  # refused by the API now: stored before that check
    cron_id = new_cron(client, auth, "@once" if never else schedule, BASE - 86400)
    if never:
        with db.connected(), db.write_transaction():
            Cron.update(schedule=schedule).where(Cron.id == cron_id).execute()
    h = state_of(cron_id, BASE)
    assert (h["state"], h["next_expected"]) == ("new", None)
    assert "no firing is expected" in h["reason"]
    run(client, auth, cron_id, BASE + 1, scheduled=False)
    assert state_of(cron_id, BASE + 100)["state"] == "ok"


@pytest.mark.parametrize("shadow_env", [{}], indirect=True)
def test_with_shadow_off_the_legacy_instances_alone_give_the_state(client, auth):
    cron_id = new_cron(client, auth, "*/10 * * * *", BASE - 3600)
    every_ten(client, auth, cron_id, BASE - 3000, BASE - 600, scheduled=False)
    with db.connected():
        assert ShadowRun.select().count() == 0
    assert state_of(cron_id, BASE + 30, shadow=False)["state"] == "ok"
    run(client, auth, cron_id, BASE + 1, exit_code=1, scheduled=False)
    assert state_of(cron_id, BASE + 30, shadow=False)["state"] == "failed"
    assert state_of(cron_id, BASE + 1000, shadow=False)["state"] == "missed"


def test_a_finish_only_run_counts_as_an_execution(client, auth):
    cron_id = new_cron(client, auth, "*/10 * * * *", BASE - 1200)
    body = {"ids": [cron_id], "status": 1, "pid": 7, "log_path": "x.log",
            "last_execution_time": BASE + 1, "last_running_time": 1, "exit_code": 4,
            "execution_id": execution_id(BASE + 1)}
    assert client.put(STATUS_PATH, json=body, headers=auth).status_code == 200
    with db.connected():
        assert RunningInstance.select().count() == 0 and ShadowRun.select().count() == 1
    h = state_of(cron_id, BASE + 300)
    assert h["state"] == "failed" and h["last_start"] == BASE + 1


def test_last_success_older_than_the_recent_executions_is_still_found(client, auth):
    cron_id = new_cron(client, auth, "* * * * *", BASE - 86400)
    run(client, auth, cron_id, BASE - 3600 + 1)
    for minute in range(health.RECENT + 2):
        run(client, auth, cron_id, BASE + minute * 60 + 1, exit_code=1)
    h = state_of(cron_id, BASE + (health.RECENT + 2) * 60)
    assert h["state"] == "failed" and h["last_success"] == BASE - 3600 + 2


# --- grace -------------------------------------------------------------------------------

@pytest.mark.parametrize("schedule, grace", [
    ("* * * * *", 60), ("*/10 * * * *", 60), ("*/30 * * * *", 180), ("0 * * * *", 360),
    ("0 3 * * *", 3600), ("0 9,17 * * *", 2880), ("0 0 1 * *", 3600), ("@once", 3600)])
def test_the_default_grace_is_a_tenth_of_the_gap_between_firings(client, auth, schedule, grace):
    cron_id = new_cron(client, auth, schedule, BASE - 40 * 86400)
    assert state_of(cron_id, BASE + 12 * 3600)["grace"] == grace


def test_a_grace_set_on_the_cron_replaces_the_default(client, auth):
    response = client.post("/open/crons", json={"name": "g", "command": "true",
                                                "schedule": "*/10 * * * *", "grace": 300},
                           headers=auth)
    assert response.status_code == 200 and "grace" not in response.get_json()["data"]
    cron_id = response.get_json()["data"]["id"]
    with db.connected(), db.write_transaction():
        Cron.update(created_at=BASE - 3600, updated_at=BASE - 3600).where(
            Cron.id == cron_id).execute()
    every_ten(client, auth, cron_id, BASE - 3000, BASE - 600)
    late = state_of(cron_id, BASE + 90)
    assert (late["state"], late["since"]) == ("late", BASE + 60)
    assert "no record yet" in late["reason"]
    assert state_of(cron_id, BASE + 299)["state"] == "late"
    assert state_of(cron_id, BASE + 300)["state"] == "missed"
    assert state_of(cron_id, BASE + 300)["grace"] == 300
    assert client.put("/open/crons", json={"id": cron_id, "grace": None},
                      headers=auth).status_code == 200
    back = state_of(cron_id, BASE + 360)  # back to the default; the same firings judged
    assert (back["grace"], back["state"]) == (60, "missed")


@pytest.mark.parametrize("value", [-1, 7 * 86400 + 1, "60", 1.5, True, [60]])
def test_a_bad_grace_is_a_400_naming_it_and_writes_nothing(client, auth, make_cron, value):
    cron = make_cron()
    response = client.put("/open/crons", json={"id": cron["id"], "grace": value, "name": "x"},
                          headers=auth)
    assert response.status_code == 400
    assert "'grace'" in response.get_json()["message"]
    shown = client.get(f"/open/crons/{cron['id']}", headers=auth).get_json()["data"]
    assert shown["name"] == "backup"


def test_grace_is_not_part_of_the_task_revision(client, auth, make_cron):
    from qlshadow.storage.models import DEFINITION_FIELDS
    from qlshadow.core.shadow.writer import cron_revision
    assert "grace" not in DEFINITION_FIELDS
    cron = make_cron()
    with db.connected(), db.write_transaction():
        Cron.update(updated_at=BASE).where(Cron.id == cron["id"]).execute()
        before = cron_revision(Cron.select().where(Cron.id == cron["id"]).dicts().get())
    assert client.put("/open/crons", json={"id": cron["id"], "grace": 900},
                      headers=auth).status_code == 200
    with db.connected():
        row = Cron.select().where(Cron.id == cron["id"]).dicts().get()
    assert row["grace"] == 900 and cron_revision(row) == before
    assert row["updated_at"] == BASE  # the definition did not change
    # The callback's Runs of this cron keep the revision the API documents for it.
    assert before == "a99e6d54ea1f387e8640c8861ac48f9ab4f12934e484f5e37f335e72d9898302"


# --- the API and the command line ------------------------------------------------------------

def states_now(client, auth) -> dict:
    """Five crons whose state does not depend on the clock: {name: cron id}."""
    now = int(time.time())
    made = {}
    for name, schedule in (("fine", "@once"), ("older-failure", "@boot"), ("paused", "@once"),
                           ("fresh", "@boot"), ("busy", "*/5 * * * * *"),
                           ("newer-failure", "@once")):
        made[name] = new_cron(client, auth, schedule, now - 3600, name=name)
    run(client, auth, made["fine"], now - 100, scheduled=False)
    run(client, auth, made["older-failure"], now - 300, exit_code=1, scheduled=False)
    run(client, auth, made["newer-failure"], now - 200, exit_code=1, scheduled=False)
    run(client, auth, made["busy"], now - 10, duration=None, scheduled=False)
    assert client.put("/open/crons/disable", json=[made["paused"]], headers=auth).status_code == 200
    return made


def test_the_health_endpoint_lists_problems_newest_first_then_running_new_paused_ok(client, auth):
    made = states_now(client, auth)
    response = client.get("/open/crons/health", headers=auth)
    assert response.status_code == 200
    data = response.get_json()["data"]
    assert [row["name"] for row in data] == ["newer-failure", "older-failure", "busy", "fresh",
                                            "paused", "fine"]
    assert [row["state"] for row in data] == ["failed", "failed", "running", "new", "paused", "ok"]
    for row in data:
        assert list(row) == ["cron_id", "name", "schedule", "state", "since", "next_expected",
                             "last_success", "last_start", "grace", "reason",
                             "snoozed_until", "quiet", "open"]
        assert row["reason"].endswith(".")
    fine = data[-1]
    assert fine["cron_id"] == made["fine"] and fine["last_success"] == fine["last_start"] + 1
    assert all(isinstance(row[k], int) or row[k] is None for row in data
               for k in ("since", "next_expected", "last_success", "last_start", "grace"))


def test_the_health_endpoint_takes_a_runs_token_and_refuses_others(app, client):
    with db.connected(), db.write_transaction():
        create_app_record("reader", ["runs"])
        create_app_record("scraper", ["metrics"])
        reader, _ = issue_token(App.get(App.name == "reader").id, int(time.time()))
        scraper, _ = issue_token(App.get(App.name == "scraper").id, int(time.time()))
    assert client.get("/open/crons/health").status_code == 401
    assert client.get("/open/crons/health",
                      headers={"Authorization": f"Bearer {reader}"}).status_code == 200
    assert client.get("/open/crons/health",
                      headers={"Authorization": f"Bearer {scraper}"}).status_code == 403


def test_qlshadow_status_prints_a_table_and_json(client, auth, settings):
    made = states_now(client, auth)
    env = {**cli_env(settings), "QL3_SHADOW_ORIGINS": "scheduled_system"}
    table = run_cli(env, "status").stdout.splitlines()
    assert table[0].split() == ["cron", "name", "state", "since", "next", "last", "success",
                                "last", "start", "grace", "reason"]
    assert [line.split()[2] for line in table[1:-2]] == ["failed", "failed", "running", "new",
                                                        "paused", "ok"]
    assert table[-2] == "open executions: 1 running, 0 stuck, 0 finish lost"
    assert table[-1].startswith("storage: ")  # the storage budget's use, last
    assert "exited with code 1." in table[1]
    document = json.loads(run_cli(env, "status", "--json").stdout)
    assert [row["cron_id"] for row in document["data"]] == [
        made[n] for n in ("newer-failure", "older-failure", "busy", "fresh", "paused", "fine")]
    assert document["data"][0]["state"] == "failed"


def test_qlshadow_status_with_no_database_file_says_so_and_creates_none(tmp_path):
    env = {"QL_DATA_DIR": str(tmp_path / "data"), "QL_DB_URL": f"sqlite:///{tmp_path}/none.db",
           "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": ""}
    result = run_cli(env, "status", check=False)
    assert result.returncode == 1 and "no database at" in result.stderr
    assert not (tmp_path / "none.db").exists()


# --- the pure function ----------------------------------------------------------------------

def test_evaluate_needs_no_database():
    cron = {"id": 1, "name": "n", "schedule": "0 * * * *", "is_disabled": 0, "grace": None,
            "created_at": BASE - 86400, "updated_at": BASE - 86400}
    firings = health.Firings([BASE - 3600, BASE], BASE + 3600)
    done = [health.Execution(BASE - 3600 + 1, BASE - 3600 + 5, 0, False, True)]
    h = health.evaluate(cron, done, firings, BASE + 100)
    assert (h["state"], h["grace"], h["next_expected"]) == ("late", 360, BASE + 3600)
    assert health.evaluate(cron, done, firings, BASE + 359)["state"] == "late"
    assert health.evaluate(cron, done, firings, BASE + 360)["state"] == "missed"


# --- the gate counts failures ---------------------------------------------------------------

def gate_report(cron_id: int) -> dict:
    from qlshadow.watch.reconcile import reconcile
    with db.connected():
        return reconcile(BASE, BASE + 3600, cron_id, now=BASE + 3600 + 120)


def test_the_gate_fails_a_cron_whose_runs_exit_non_zero(client, auth):
    cron_id = new_cron(client, auth, "*/10 * * * *", BASE - 3600)
    for at in range(BASE, BASE + 3600, 600):
        fire(client, auth, cron_id, at, exit_code=2 if at == BASE + 1200 else 0)
    data = gate_report(cron_id)
    report = data["crons"][0]
    assert (report["failed"], report["missed"], report["verdict"]) == (1, [], "fail")
    assert report["reasons"] == ["1 of 6 finished Runs exited with a non-zero code: crond "
                                 "started them and the task failed"]
    assert data["gate"]["verdict"] == "fail"
    assert data["gate"]["reasons"] == [f"cron {cron_id} (job): {report['reasons'][0]}"]


def test_the_gate_explains_manual_runs_without_failing_for_them(client, auth):
    cron_id = new_cron(client, auth, "*/10 * * * *", BASE - 3600)
    for at in range(BASE, BASE + 3600, 600):
        fire(client, auth, cron_id, at)
    run(client, auth, cron_id, BASE + 185, scheduled=False, exit_code=1)
    report = gate_report(cron_id)["crons"][0]
    assert (report["unmatched_instances"], report["failed"], report["verdict"]) == (1, 0, "pass")
    assert report["reasons"] == ["1 Legacy instance(s) have no Run: manual runs (PUT "
                                 "/open/crons/run, `qlshadow cron run`) or runs without the "
                                 "scheduled_system marker, which never become Runs"]


# --- cheap on both databases ------------------------------------------------------------------

def test_the_health_read_is_a_few_statements_each_served_by_an_index(client, auth, monkeypatch):
    from test_indexed_reads import full_scans_and_sorts
    busy = new_cron(client, auth, "* * * * *", BASE - 86400, name="busy")
    run(client, auth, busy, BASE - 3600 + 1)
    for minute in range(health.RECENT + 1):  # no success among the recent: one more read
        run(client, auth, busy, BASE + minute * 60 + 1, exit_code=1)
    lone = new_cron(client, auth, "*/10 * * * *", BASE - 3600, name="lone")
    body = {"ids": [lone], "status": 1, "pid": 7, "exit_code": 0, "last_execution_time": BASE + 1,
            "execution_id": execution_id(BASE + 1)}  # a Run without an instance: one more read
    assert client.put(STATUS_PATH, json=body, headers=auth).status_code == 200
    with db.connected(), db.write_transaction():  # it finished in its own minute
        ShadowRun.update(finished_at=BASE + 2).where(ShadowRun.cron_id == lone).execute()
    statements = []
    database = db.database.obj
    original = database.execute_sql

    def record(sql, params=None, *args, **kwargs):
        if sql.lstrip().upper().startswith("SELECT"):
            statements.append((sql, tuple(params or ())))
        return original(sql, params, *args, **kwargs)

    with db.connected():
        monkeypatch.setattr(database, "execute_sql", record)
        healths = health.read_all(BASE + (health.RECENT + 1) * 60 + 30)
        monkeypatch.undo()
        assert {h["name"]: h["state"] for h in healths} == {"busy": "failed", "lone": "missed"}
        # crons, instances, Run starts, lone Runs, older success, and the clock steps,
        # a table of at most runtime.STEPS_KEPT rows read whole
        assert len(statements) == 6
        for sql, params in statements:
            if '"clock_steps"' in sql:
                continue
            bad = [line for line in full_scans_and_sorts(sql, params)
                   # SQLite reads each UNION ALL branch's subquery as a co-routine: "SCAN i1".
                   if not (db.is_sqlite() and line.split()[:1] == ["SCAN"]
                           and line.split()[1][:1] in "irs" and line.split()[1][1:].isdigit())]
            assert bad == [], sql
