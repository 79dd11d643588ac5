"""One story on every surface (issue 35): an execution whose finish was lost, BusyBox crond's
overlap skips, a cron enabled again, and gaps on the page's strip.

The same lost finish must carry the same word in `qlshadow status`, `qlshadow runs` (table
and JSON), GET /open/runs, the cron page, the Run page, the strip, the gate and /metrics.
Histories go through the status callback as task.sh sends it, dated around the real clock
(the CLI reads it), each finish dated to when the run ended.
"""
from __future__ import annotations

import json
import re
import time

import pytest

from qlshadow.storage import db
from qlshadow.core.auth import create_app_record, issue_token
from qlshadow.storage.models import App, Cron
from qlshadow.watch import health
from helpers import SHADOW_ON, cli_env, run_cli
from reconcile_history import away_from_the_minutes_end, callback, fire, new_cron, took

pytestmark = pytest.mark.shadow_on

MINUTE = 60


def sign_in(app):
    """A second client of the app, signed in to the page."""
    page = app.test_client()
    with db.database.connection_context(), db.write_transaction():
        client_id, secret = create_app_record("viewer", ["crons", "runs"])
    response = page.post("/page/login", data={"client_id": client_id, "client_secret": secret})
    assert response.status_code == 303
    return page


def metrics(app, client) -> str:
    with db.database.connection_context(), db.write_transaction():
        create_app_record("prometheus", ["metrics"])
        value, _ = issue_token(App.get(App.name == "prometheus").id, int(time.time()))
    response = client.get("/metrics", headers={"Authorization": f"Bearer {value}"})
    assert response.status_code == 200
    return response.get_data(as_text=True)


@pytest.fixture
def lost_finish(client, auth):
    """An every-minute cron that ran each of the last 20 minutes (and this one) for 2 s; the
    finish of the run 14 minutes ago was lost. Returns (cron id, its start, now)."""
    now = int(time.time())
    base = now // MINUTE * MINUTE
    cron_id = new_cron(client, auth, "* * * * *", base - 21 * MINUTE, name="sleeper")
    for minutes in range(20, -1, -1):
        fire(client, auth, cron_id, base - minutes * MINUTE, finish=minutes != 14)
    return cron_id, base - 14 * MINUTE + 1, now


def test_a_lost_finish_is_finish_lost_on_every_surface(app, client, auth, settings, lost_finish):
    cron_id, lost, now = lost_finish
    env = {**cli_env(settings), **SHADOW_ON}

    # qlshadow status: the cron runs fine; its one open execution is a lost finish.
    status = run_cli(env, "status", "--json")
    (row,) = json.loads(status.stdout)["data"]
    assert (row["state"], row["open"]) == ("ok", {"running": 0, "stuck": 0, "finish_lost": 1})
    assert run_cli(env, "status").stdout.splitlines()[-2] == (
        "open executions: 0 running, 0 stuck, 1 finish lost")

    # qlshadow runs: the derived word in the table and the JSON; --state picks it.
    listed = json.loads(run_cli(env, "runs", "--json").stdout)["data"]
    by_start = {r["accepted_at"]: r for r in listed}
    assert (by_start[lost]["state"], by_start[lost]["condition"]) == ("running", "finish_lost")
    assert {r["condition"] for r in listed if r["accepted_at"] != lost} == {"exited"}
    run_id = by_start[lost]["id"]
    table = run_cli(env, "runs").stdout.splitlines()
    assert "finish lost" in next(line for line in table if line.startswith(run_id))
    assert [r["id"] for r in json.loads(
        run_cli(env, "runs", "--state", "finish_lost", "--json").stdout)["data"]] == [run_id]
    assert json.loads(run_cli(env, "runs", "--state", "running", "--json").stdout)["data"] == []
    assert json.loads(run_cli(env, "runs", "--state", "stuck", "--json").stdout)["data"] == []

    # GET /open/runs and /open/runs/<id>: the stored state stays, the condition says it.
    answer = client.get(f"/open/runs?cron_id={cron_id}", headers=auth).get_json()["data"]
    assert [r["condition"] for r in answer if r["id"] == run_id] == ["finish_lost"]
    one = client.get(f"/open/runs/{run_id}", headers=auth).get_json()["data"]
    assert (one["state"], one["condition"]) == ("running", "finish_lost")

    # The page: the strip, the cron page's row, the Run page.
    page = sign_in(app)
    crons = page.get("/page/").get_data(as_text=True)
    assert "1 finish lost" in crons and "1 stuck" not in crons
    cron_page = page.get(f"/page/crons/{cron_id}").get_data(as_text=True)
    assert re.findall(r'<rect class="(finish_lost|stuck|running)"', cron_page) == ["finish_lost"]
    assert '<span class="finish_lost"' in cron_page and "stuck since" not in cron_page
    run_page = page.get(f"/page/runs/{run_id}").get_data(as_text=True)
    assert '<span class="finish_lost">finish lost</span>' in run_page
    assert '<span class="running">running</span>' not in run_page

    # The gate, in-process and through the command.
    from qlshadow.watch.reconcile import reconcile
    with db.connected():
        data = reconcile(lost - 10 * MINUTE, now, now=now)
    (report,) = data["crons"]
    assert (report["running"], report["stuck"], report["finish_lost"]) == (0, 0, 1)
    printed = json.loads(run_cli(env, "reconcile", "--json", "--since", str(lost - 600),
                                 check=False).stdout)["data"]["crons"][0]
    assert (printed["running"], printed["stuck"], printed["finish_lost"]) == (0, 0, 1)

    # /metrics: the open executions by condition.
    text = metrics(app, client)
    assert (f'qlshadow_cron_open_executions{{cron_id="{cron_id}",name="sleeper",'
            f'condition="finish_lost"}} 1') in text
    for word in ("running", "stuck"):
        assert (f'qlshadow_cron_open_executions{{cron_id="{cron_id}",name="sleeper",'
                f'condition="{word}"}} 0') in text


def test_the_newest_open_run_is_running_then_stuck_past_its_limit_everywhere(client, auth):
    # Its runs take 2 s, so its limit is its grace (60 s): health, the Runs and the gate
    # judge the newest open Run by that same limit.
    base = (int(time.time()) - 3600) // MINUTE * MINUTE
    cron_id = new_cron(client, auth, "* * * * *", base - 21 * MINUTE, name="sleeper")
    for minutes in range(20, 0, -1):
        fire(client, auth, cron_id, base - minutes * MINUTE, finish=minutes != 14)
    fire(client, auth, cron_id, base, finish=False)
    started = base + 1
    with db.connected():
        for at, word in ((started + 30, "running"), (started + 61, "stuck")):
            (found,) = health.read_all(at)
            assert found["open"] == {"running": int(word == "running"),
                                     "stuck": int(word == "stuck"), "finish_lost": 1}
            assert found["state"] == ("stuck" if word == "stuck" else "running")
            runs = client.get(f"/open/runs?cron_id={cron_id}&limit=1",
                              headers=auth).get_json()["data"]
            assert health.with_conditions(runs, at)[0]["condition"] == word
            from qlshadow.watch.reconcile import reconcile
            report = reconcile(started - 600, started + 1, now=at)["crons"][0]
            assert (report["running"], report["stuck"]) == (int(word == "running"),
                                                           int(word == "stuck"))


def test_the_condition_is_a_pure_function_of_start_limit_now_and_a_later_start():
    assert health.condition(100, 60, 150) == ("running", 100)
    assert health.condition(100, 60, 161) == ("stuck", 160)
    assert health.condition(100, 60, 150, later_start=130) == ("finish_lost", 130)
    # A daemon that starts overlapping runs proves nothing by a later start.
    assert health.condition(100, 60, 150, 130, overlapping=True) == ("running", 100)
    assert health.condition(100, 60, 161, 130, overlapping=True) == ("stuck", 160)


# --- BusyBox crond's overlap skip --------------------------------------------------------------

@pytest.fixture
def long_runs(client, auth):
    """An every-minute cron whose runs take 70 s: crond started it every other minute over
    the last 20 minutes. Returns (cron id, window since, now, the skipped firings).
    The firing of this minute has no run, and the page judges it once the minute ends."""
    now = away_from_the_minutes_end()
    base = now // MINUTE * MINUTE
    since = base - 20 * MINUTE
    cron_id = new_cron(client, auth, "* * * * *", since - 30, name="sleeper")
    for at in range(since, base, 2 * MINUTE):
        eid = fire(client, auth, cron_id, at, finish=False)
        callback(client, auth, cron_id, 1, at + 1, 1000 + (at // 60) % 30000, eid)
        took(cron_id, at + 1, 70)
    return cron_id, since, now, list(range(since + MINUTE, base, 2 * MINUTE))


def test_a_firing_busybox_skipped_while_the_run_went_on_is_not_missed(client, auth, long_runs):
    cron_id, since, now, skipped = long_runs
    from qlshadow.watch.reconcile import reconcile
    with db.connected():
        busybox = reconcile(since, now, now=now, daemon="busybox")["crons"][0]
        debian = reconcile(since, now, now=now, daemon="overlapping")["crons"][0]
        unknown = reconcile(since, now, now=now)["crons"][0]
        healths = {daemon: health.read_all(now, daemon=daemon, count_missed=True)[0]
                   for daemon in ("busybox", "overlapping")}
    judged = [f for f in skipped if f < now - 59]
    assert (busybox["missed"], busybox["skipped_running"], busybox["verdict"]) == (
        [], len(judged), "pass")
    assert any("skipped (still running)" in reason for reason in busybox["reasons"])
    assert unknown["missed"] == [] and unknown["verdict"] == "pass"
    # Debian's cron starts overlapping runs: a firing without a run is missed there.
    assert (debian["missed"], debian["skipped_running"], debian["verdict"]) == (
        judged, 0, "fail")
    assert healths["busybox"]["state"] in ("ok", "running")
    assert healths["busybox"]["missed_recent"] == 0
    assert healths["overlapping"]["missed_recent"] > 0


def test_the_strip_draws_busybox_skips_as_skipped_not_missed(app, client, auth, long_runs):
    cron_id, since, now, skipped = long_runs
    html = sign_in(app).get(f"/page/crons/{cron_id}").get_data(as_text=True)
    kinds = re.findall(r'<rect class="(ok|missed|late|skipped)"', html)
    assert "missed" not in kinds and kinds.count("skipped") >= 5
    assert "skipped (still running)" in html


def test_the_strip_shows_every_missed_firing_the_gate_lists(app, client, auth):
    # An outage of three minutes: the record of the minute after it stands for that minute,
    # not for the last gap before it. This minute's firing has no run either: the page must
    # not judge it.
    now = away_from_the_minutes_end()
    base = now // MINUTE * MINUTE
    since = base - 12 * MINUTE
    cron_id = new_cron(client, auth, "* * * * *", since - 30, name="minutely")
    out = {base - 8 * MINUTE, base - 7 * MINUTE, base - 6 * MINUTE}
    for at in range(since, base, MINUTE):
        if at not in out:
            fire(client, auth, cron_id, at)
    from qlshadow.watch.reconcile import reconcile
    with db.connected():
        report = reconcile(since, now, now=now, daemon="busybox")["crons"][0]
    assert report["missed"] == sorted(out)
    html = sign_in(app).get(f"/page/crons/{cron_id}").get_data(as_text=True)
    assert re.findall(r'<rect class="(ok|missed|late|skipped)"', html).count("missed") == 3
    assert "3 missed" in html


# --- a cron enabled again -----------------------------------------------------------------------

def test_a_cron_enabled_again_is_judged_from_then_in_words(client, auth, settings):
    now = int(time.time())
    base = (now - MINUTE) // 300 * 300  # its newest judged firing
    since = base - 60 * MINUTE
    cron_id = new_cron(client, auth, "*/5 * * * *", since - 3600, name="toggled")
    for at in range(since, base - 40 * MINUTE, 5 * MINUTE):
        fire(client, auth, cron_id, at)
    for path in ("/open/crons/disable", "/open/crons/enable"):
        assert client.put(path, json=[cron_id], headers=auth).status_code == 200
    # Enabled again 30 minutes ago (it was off for ten): its firings since then ran.
    enabled = base - 30 * MINUTE - 10
    with db.connected(), db.write_transaction():
        Cron.update(updated_at=enabled).where(Cron.id == cron_id).execute()
    for at in range(base - 30 * MINUTE, base + 1, 5 * MINUTE):
        fire(client, auth, cron_id, at)
    from qlshadow.cli.gate_report import format_report
    from qlshadow.watch.reconcile import reconcile
    with db.connected():
        data = reconcile(since, now, now=now)
        (report,) = data["crons"]
        assert (report["evaluated_from"], report["missed"], report["verdict"]) == (
            enabled + 1, [], "pass")
        assert report["expected"] == 7
        assert health.read_all(now)[0]["state"] == "ok"
        text = format_report(data)
        assert "nowhere" not in text
        assert "was changed or enabled again in the window: its firings are judged from" in text
        # Right after it was enabled again, nothing of it has come due: said so.
        early = reconcile(since, enabled + 30, now=enabled + 30)
    (report,) = early["crons"]
    assert report["evaluated_from"] is None and report["verdict"] == "insufficient"
    assert report["reasons"][0].startswith("it was changed or enabled again at ")
    assert "no firing since then has ended its minute yet" in report["reasons"][0]
    assert "none of its firings is judged yet" in format_report(early)
    env = {**cli_env(settings), **SHADOW_ON}
    printed = run_cli(env, "reconcile", "--since", str(since), check=False).stdout
    assert "nowhere" not in printed and "judged from" in printed


def test_a_manual_run_left_open_is_never_a_lost_finish(client, auth):
    now = int(time.time())
    base = now // MINUTE * MINUTE
    cron_id = new_cron(client, auth, "* * * * *", base - 5 * MINUTE, name="mixed")
    callback(client, auth, cron_id, 0, base - 4 * MINUTE + 20, 77)  # manual: no execution id
    for at in range(base - 4 * MINUTE, base, MINUTE):
        fire(client, auth, cron_id, at)
    with db.connected():
        (found,) = health.read_all(base - 4 * MINUTE + 50)
        assert found["open"]["finish_lost"] == 0


def test_health_asks_for_the_daemon_only_when_a_firing_or_a_run_needs_it():
    # The tick runs every minute: an idle one must not scan /proc for the daemon.
    cron = {"id": 1, "name": "job", "schedule": "* * * * *", "is_disabled": 0,
            "created_at": 0, "updated_at": 0, "grace": 20}
    firings = health.Firings([6000, 6060], 6180, lambda t: (t // 60 + 1) * 60)
    asked = []

    def daemon():
        asked.append(1)
        return "busybox"

    every = [health.Execution(t + 1, t + 3, 0, False, True) for t in range(5400, 6121, 60)]
    assert health.evaluate(cron, every, firings, 6150, daemon=daemon)["state"] == "ok"
    assert asked == []
    # The firing at 6060 has no record while the run of the minute before went on: asked.
    long = [e for e in every if e.start not in (6001, 6061)]
    long.append(health.Execution(6001, 6071, 0, False, True))
    assert health.evaluate(cron, long, firings, 6150, daemon=daemon)["state"] == "ok"
    assert asked == [1]
    assert health.evaluate(cron, long, firings, 6150, daemon="overlapping")["state"] == "missed"


def test_under_a_daemon_that_overlaps_runs_a_run_left_open_is_stuck_everywhere(client, auth,
                                                                              lost_finish):
    # Debian's cron starts the next run whatever the last one does: a later start proves
    # nothing, so the open run is judged by its age (14 minutes, past its 60 s limit).
    cron_id, lost, now = lost_finish
    from qlshadow.watch.reconcile import reconcile
    with db.connected():
        (found,) = health.read_all(now, daemon="overlapping")
        report = reconcile(lost - 600, now, now=now, daemon="overlapping")["crons"][0]
        runs = client.get(f"/open/runs?cron_id={cron_id}", headers=auth).get_json()["data"]
        words = {r["accepted_at"]: r["condition"]
                 for r in health.with_conditions(runs, now, daemon="overlapping")}
    assert (found["state"], found["open"]["stuck"], found["open"]["finish_lost"]) == (
        "stuck", 1, 0)
    assert (report["stuck"], report["finish_lost"], report["running"]) == (1, 0, 0)
    assert words[lost] == "stuck"
