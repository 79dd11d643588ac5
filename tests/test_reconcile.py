"""The reconciliation gate over synthetic crond histories sent through the callback API.

Each history is a window of past firings; every execution goes through PUT
/open/crons/status with a crafted execution id, exactly as task.sh would send it. Each
defect class must show up in its own field and in no other.
"""
from __future__ import annotations

import time

import pytest

from qlshadow.storage import db
from qlshadow.storage.models import Cron
from reconcile_history import (HOUR, callback, defects, fire, history, local_zone, new_cron,
                               report_of)


# Histories below are laid out in UTC minutes (a test may set its own zone inside).
pytestmark = [pytest.mark.shadow_on, pytest.mark.usefixtures("utc_box")]


@pytest.fixture
def window():
    """(since, end, until, now): six past hours ending on an hour at least an hour ago.

    `now` makes the gate judge firings up to `end` only; `until` reaches past the real
    clock so that accept failures recorded while the test runs fall inside the window.
    """
    end = int(time.time()) // HOUR * HOUR - HOUR
    since = end - 6 * HOUR
    return since, end, int(time.time()) + 600, end + 59


def every_ten_minutes(since: int, end: int) -> list:
    return list(range(since, end, 600))


def test_a_clean_week_passes(client, auth):
    end = int(time.time()) // HOUR * HOUR - HOUR
    since = end - 7 * 24 * HOUR
    cron_id = new_cron(client, auth, "17 * * * *", since - HOUR)
    times = list(range(since + 17 * 60, end, HOUR))
    history(client, auth, cron_id, times)
    from qlshadow.watch.reconcile import reconcile
    with db.connected():
        data = reconcile(since, end, now=end + 59)
    (report,) = data["crons"]
    assert data["gate"]["verdict"] == "pass", data["gate"]
    assert report["expected"] == len(times) == report["runs"] == report["exited"]
    assert defects(report) == {} and report["verdict"] == "pass"


def test_a_missed_minute_shows_only_in_missed(client, auth, window):
    since, end, until, now = window
    cron_id = new_cron(client, auth, "*/10 * * * *", since - HOUR)
    times = every_ten_minutes(since, end)
    history(client, auth, cron_id, times, skip={times[5]})
    report = report_of(cron_id, since, until, now)
    assert defects(report) == {"missed": [times[5]]}
    assert (report["expected"], report["runs"]) == (len(times), len(times) - 1)
    assert report["verdict"] == "fail"


def test_a_lost_start_shows_only_in_finish_only(client, auth, window):
    since, end, until, now = window
    cron_id = new_cron(client, auth, "*/10 * * * *", since - HOUR)
    times = every_ten_minutes(since, end)
    history(client, auth, cron_id, times, skip={times[3]})
    fire(client, auth, cron_id, times[3], start=False)
    report = report_of(cron_id, since, until, now)
    assert defects(report) == {"finish_only": 1}
    assert report["runs"] == report["expected"] == len(times)


def test_a_lost_finish_before_a_later_run_shows_only_in_finish_lost(client, auth, window):
    since, end, until, now = window
    cron_id = new_cron(client, auth, "*/10 * * * *", since - HOUR)
    times = every_ten_minutes(since, end)
    history(client, auth, cron_id, times, skip={times[0]})
    fire(client, auth, cron_id, times[0], finish=False)
    report = report_of(cron_id, since, until, now)
    assert defects(report) == {"finish_lost": 1}
    assert (report["running"], report["stuck"]) == (0, 0) and report["runs"] == len(times)


def test_the_newest_run_without_a_finish_is_stuck_past_stuck_after(client, auth, window):
    since, end, until, now = window
    cron_id = new_cron(client, auth, "*/10 * * * *", since - HOUR)
    times = every_ten_minutes(since, end)
    history(client, auth, cron_id, times, skip={times[-1]})
    fire(client, auth, cron_id, times[-1], finish=False)
    report = report_of(cron_id, since, until, now, stuck_after=600)
    assert defects(report) == {"stuck": 1} and report["running"] == 0


def test_a_run_still_within_stuck_after_is_running_not_stuck(client, auth, window):
    since, end, until, now = window
    cron_id = new_cron(client, auth, "*/10 * * * *", since - HOUR)
    times = every_ten_minutes(since, end)
    history(client, auth, cron_id, times, skip={times[-1]})
    fire(client, auth, cron_id, times[-1], finish=False)
    report = report_of(cron_id, since, until, now, stuck_after=3600)
    assert (report["running"], report["stuck"]) == (1, 0)


def test_without_stuck_after_a_run_is_stuck_past_its_crons_own_limit(client, auth, window):
    # Its runs take 2 s: health's limit is its grace (60 s), and the open Run is 11 min old.
    since, end, until, now = window
    cron_id = new_cron(client, auth, "*/10 * * * *", since - HOUR)
    times = every_ten_minutes(since, end)
    history(client, auth, cron_id, times, skip={times[-1]})
    fire(client, auth, cron_id, times[-1], finish=False)
    report = report_of(cron_id, since, until, now)
    assert (report["running"], report["stuck"]) == (0, 1)
    assert report_of(cron_id, since, until, times[-1] + 1 + 30)["running"] == 1


def test_two_daemons_firing_the_same_minute_show_only_in_double(client, auth, window):
    since, end, until, now = window
    cron_id = new_cron(client, auth, "*/10 * * * *", since - HOUR)
    times = every_ten_minutes(since, end)
    history(client, auth, cron_id, times)
    second = fire(client, auth, cron_id, times[7], pid=31337, delay=2)
    report = report_of(cron_id, since, until, now)
    assert defects(report).keys() == {"double"}
    (double,) = report["double"]
    assert double["at"] == times[7] and len(double["run_ids"]) == 2
    with db.connected():
        from qlshadow.storage.models import ShadowRun
        from qlshadow.core.shadow.ids import request_uuid, uuid_text
        stored = uuid_text(ShadowRun.get(ShadowRun.request_uuid == request_uuid(second)).id)
    assert stored in double["run_ids"]
    assert report["verdict"] == "fail"


def test_a_drifted_definition_shows_only_in_drift(client, auth, window):
    since, end, until, now = window
    cron_id = new_cron(client, auth, "*/10 * * * *", since - HOUR)
    times = every_ten_minutes(since, end)
    history(client, auth, cron_id, times[:-1])
    # The last run is in flight when its cron is edited: its finish no longer matches.
    eid = fire(client, auth, cron_id, times[-1], finish=False)
    response = client.put("/open/crons", json={"id": cron_id, "command": "run edited"},
                          headers=auth)
    assert response.status_code == 200
    callback(client, auth, cron_id, 1, times[-1] + 1, 1000 + (times[-1] // 60) % 30000, eid)
    report = report_of(cron_id, since, until, now, stuck_after=3600)
    assert defects(report) == {"drift": 1}
    assert report["definition_changed"] is True and report["verdict"] == "fail"


def test_a_manual_run_shows_only_in_unmatched_instances(client, auth, window):
    since, end, until, now = window
    cron_id = new_cron(client, auth, "*/10 * * * *", since - HOUR)
    times = every_ten_minutes(since, end)
    history(client, auth, cron_id, times)
    # A manual run carries no execution id: only Legacy callbacks, between two firings.
    callback(client, auth, cron_id, 0, times[2] + 185, 4242)
    callback(client, auth, cron_id, 1, times[2] + 185, 4242)
    report = report_of(cron_id, since, until, now)
    assert defects(report) == {"unmatched_instances": 1}
    assert report["verdict"] == "pass"


def test_an_invalid_execution_id_counts_as_invalid_and_leaves_its_instance_unmatched(
        client, auth, window):
    since, end, until, now = window
    cron_id = new_cron(client, auth, "*/10 * * * *", since - HOUR)
    times = every_ten_minutes(since, end)
    history(client, auth, cron_id, times, skip={times[4]})
    callback(client, auth, cron_id, 0, times[4] + 1, 777, "legacy-system:0:not-a-uuid")
    callback(client, auth, cron_id, 1, times[4] + 1, 777, "legacy-system:0:not-a-uuid")
    report = report_of(cron_id, since, until, now)
    assert defects(report) == {"invalid": 2, "unmatched_instances": 1}


def test_lost_callbacks_beyond_the_tolerated_share_fail_the_cron(client, auth, window):
    since, end, until, now = window
    cron_id = new_cron(client, auth, "*/10 * * * *", since - HOUR)
    times = every_ten_minutes(since, end)
    history(client, auth, cron_id, times, skip={times[3]})
    fire(client, auth, cron_id, times[3], start=False)
    share = 1 / len(times)
    assert report_of(cron_id, since, until, now, tolerance=share)["verdict"] == "pass"
    strict = report_of(cron_id, since, until, now, tolerance=share * 0.9)
    assert strict["verdict"] == "fail"
    assert f"1 of {len(times)} Runs" in strict["reasons"][0]


def test_a_cron_created_inside_the_window_is_judged_from_its_creation(client, auth, window):
    since, end, until, now = window
    created = since + 2 * HOUR + 30
    cron_id = new_cron(client, auth, "*/10 * * * *", created)
    times = [t for t in every_ten_minutes(since, end) if t > created]
    history(client, auth, cron_id, times)
    report = report_of(cron_id, since, until, now)
    assert report["expected"] == report["runs"] == len(times)
    assert defects(report) == {} and report["verdict"] == "pass"


def test_a_definition_changed_inside_the_window_is_judged_from_the_change(client, auth, window):
    since, end, until, now = window
    cron_id = new_cron(client, auth, "*/10 * * * *", since - HOUR)
    changed = since + 3 * HOUR + 30
    old = [t for t in every_ten_minutes(since, end) if t < changed]
    history(client, auth, cron_id, old)
    with db.connected(), db.write_transaction():
        Cron.update(schedule="*/20 * * * *", updated_at=changed).where(Cron.id == cron_id).execute()
    new = [t for t in range(since, end, 1200) if t > changed]
    history(client, auth, cron_id, new)
    report = report_of(cron_id, since, until, now)
    assert report["definition_changed"] is True and report["evaluated_from"] == changed + 1
    assert report["expected"] == len(new) and report["runs"] == len(old) + len(new)
    assert defects(report) == {} and report["verdict"] == "pass"


def test_runs_under_another_revision_after_a_later_edit_make_the_window_insufficient(
        client, auth, window):
    since, end, until, now = window
    cron_id = new_cron(client, auth, "*/10 * * * *", since - HOUR)
    history(client, auth, cron_id, every_ten_minutes(since, end))
    response = client.put("/open/crons", json={"id": cron_id, "schedule": "*/5 * * * *"},
                          headers=auth)
    assert response.status_code == 200
    report = report_of(cron_id, since, end, now)  # the window ends before the edit
    assert report["definition_changed"] is True and report["expected"] == 0
    assert report["verdict"] == "insufficient"
    assert "changed after the window" in report["reasons"][0]


def test_a_window_without_any_firing_is_insufficient_and_says_what_it_needs(client, auth, window):
    since, end, until, now = window
    cron_id = new_cron(client, auth, "0 0 1 1 *", since - HOUR)  # once a year
    report = report_of(cron_id, since, end, now)
    assert report["expected"] == 0 and report["verdict"] == "insufficient"
    assert "needs a window that covers at least one firing" in report["reasons"][0]


def test_firings_with_only_legacy_instances_are_insufficient_not_passed(client, auth, window):
    since, end, until, now = window
    cron_id = new_cron(client, auth, "*/10 * * * *", since - HOUR)
    for at in every_ten_minutes(since, end):
        callback(client, auth, cron_id, 0, at + 1, 55)
        callback(client, auth, cron_id, 1, at + 1, 55)
    report = report_of(cron_id, since, end, now)
    assert report["runs"] == 0 and report["missed"] == []
    assert report["verdict"] == "insufficient" and "no Shadow Run" in report["reasons"][0]


def test_inactive_crons_are_left_out_of_the_whole_gate(client, auth, window):
    since, end, until, now = window
    active = new_cron(client, auth, "*/10 * * * *", since - HOUR, name="on")
    disabled = new_cron(client, auth, "*/10 * * * *", since - HOUR, name="off")
    seconds = new_cron(client, auth, "0 */10 * * * *", since - HOUR, name="secs")
    assert client.put("/open/crons/disable", json=[disabled], headers=auth).status_code == 200
    history(client, auth, active, every_ten_minutes(since, end))
    from qlshadow.watch.reconcile import reconcile
    with db.connected():
        data = reconcile(since, until, now=now)
    assert [r["cron_id"] for r in data["crons"]] == [active]
    assert seconds not in [r["cron_id"] for r in data["crons"]]
    assert data["gate"]["verdict"] == "pass"


def test_missed_firings_beyond_the_cap_are_counted_not_listed(client, auth):
    from qlshadow.watch.reconcile import MAX_LISTED
    end = int(time.time()) // HOUR * HOUR - HOUR
    since = end - 3 * HOUR
    cron_id = new_cron(client, auth, "* * * * *", since - HOUR)
    report = report_of(cron_id, since, end, end + 59)
    assert len(report["missed"]) == MAX_LISTED
    assert report["missed_omitted"] == 3 * 60 - MAX_LISTED


def test_a_fall_back_night_fires_twice_and_both_runs_are_expected(client, auth):
    with local_zone("Europe/Berlin"):
        # The week holding the last Sunday of October 2025 (02:00-03:00 repeats).
        since = int(time.mktime((2025, 10, 21, 0, 0, 0, 0, 0, -1)))
        until = int(time.mktime((2025, 10, 28, 0, 0, 0, 0, 0, -1)))
        cron_id = new_cron(client, auth, "30 2 * * *", since - HOUR)
        times = [t for t in range(since, until, 60) if time.localtime(t)[3:5] == (2, 30)]
        history(client, auth, cron_id, times)
        report = report_of(cron_id, since, until, until + 59)
    assert len(times) == 8  # seven nights, one of them twice
    assert report["expected"] == report["runs"] == 8
    assert defects(report) == {} and report["verdict"] == "pass"


def test_a_report_over_every_cron_counts_each_cron_apart(client, auth, window):
    since, end, until, now = window
    clean = new_cron(client, auth, "*/10 * * * *", since - HOUR, name="clean")
    faulty = new_cron(client, auth, "*/10 * * * *", since - HOUR, name="faulty")
    times = every_ten_minutes(since, end)
    history(client, auth, clean, times)
    history(client, auth, faulty, times, skip={times[1], times[2]})
    fire(client, auth, faulty, times[1], start=False)
    fire(client, auth, faulty, times[2], finish=False)
    callback(client, auth, faulty, 0, times[4] + 200, 4242)
    from qlshadow.watch.reconcile import reconcile
    with db.connected():
        data = reconcile(since, until, now=now)
    reports = {r["cron_id"]: r for r in data["crons"]}
    assert defects(reports[clean]) == {} and reports[clean]["runs"] == len(times)
    assert defects(reports[faulty]) == {"finish_only": 1, "finish_lost": 1,
                                        "unmatched_instances": 1}
    assert reports[faulty]["runs"] == len(times)
    assert data["gate"]["verdict"] == "fail"
    assert all(reason.startswith(f"cron {faulty} (faulty): ") for reason in data["gate"]["reasons"])
