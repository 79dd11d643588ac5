"""Steps of the wall clock: the service's clock watch finds and records them (runtime.py), and
the gate and health judge the firings crond skipped or repeated across one as `clock step`,
never missed or double (both databases).

The clock is injected: the watch's real detection runs over (wall, boot clock) readings laid
out as a router's boot looks (its clock set from a file's time, then stepped by NTP).
"""
from __future__ import annotations

import os
import threading
import time

import pytest
from peewee import DatabaseError

from qlshadow.storage import db
from qlshadow.watch.health import read_all
from qlshadow.storage.models import ClockStep
from qlshadow.core.runtime import STEPS_KEPT, ClockWatch, record_step, watch_clock
from helpers import table_rows
from reconcile_history import HOUR, defects, fire, history, new_cron, report_of
from shellenv import wait_for

pytestmark = [pytest.mark.shadow_on, pytest.mark.usefixtures("utc_box")]


class Readings:
    """A clock that answers the given (wall, boot) readings in turn, then the last again."""

    def __init__(self, *readings):
        self.readings = list(readings)

    def __call__(self) -> tuple:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


def test_clocks_that_move_together_are_no_step():
    watch = ClockWatch(Readings((1000.0, 50.0), (1060.2, 110.0), (1120.9, 170.3)))
    assert watch.look() is None and watch.look() is None


def test_a_forward_step_is_the_wall_time_between_the_two_looks():
    watch = ClockWatch(Readings((1000.0, 50.0), (1000.0 + 60 + 7200, 110.0)))
    assert watch.look() == (7200, 1000, 8260)


def test_a_backward_step_is_every_wall_time_seen_twice():
    watch = ClockWatch(Readings((10_000.0, 50.0), (10_000.0 + 60 - 3600, 110.0)))
    # Stepped back 3600 s somewhere in the minute between the looks: from 6400 on, the wall
    # clock shows again what it showed before, up to as late as 10060.
    assert watch.look() == (-3600, 6400, 10060)


def test_the_service_thread_records_a_step_it_sees(app):
    stop = threading.Event()
    readings = Readings((1_000_000.0, 50.0), (1_000_060.0, 110.0), (1_007_320.0, 170.0))
    thread = watch_clock(interval=0.01, clock=readings, stop=stop)
    try:
        assert wait_for(lambda: table_rows(ClockStep), 10)
    finally:
        stop.set()
        thread.join(10)
    (row,) = table_rows(ClockStep)
    assert (row["step"], row["lo"], row["hi"], row["at"]) == (7200, 1_000_060, 1_007_320, 1_007_320)


def test_a_step_whose_write_failed_is_written_at_the_next_check(app):
    watch = ClockWatch(Readings((5000.0, 10.0), (5000.0 + 60 + 600, 70.0), (5720.0, 130.0)))
    with db.connected():
        db.database.obj.drop_tables([ClockStep])  # every write of a step fails now
        with pytest.raises(DatabaseError):
            watch.check()
        db.database.obj.create_tables([ClockStep])
    assert watch.check() is None  # no new step, but the one seen before is written now
    (row,) = table_rows(ClockStep)
    assert (row["step"], row["lo"], row["hi"]) == (600, 5000, 5660)


def test_only_the_newest_steps_are_kept(app):
    for n in range(STEPS_KEPT + 3):
        record_step(60, n, n + 60, n + 60)
    rows = table_rows(ClockStep)
    assert len(rows) == STEPS_KEPT and rows[0]["lo"] == 3


def _boot_step(at: int, step: int) -> None:
    """A router's clock stepped by `step` s in the minute after `at`, found by the watch."""
    watch = ClockWatch(Readings((float(at), 500.0), (float(at + 60 + step), 560.0)))
    assert watch.check() is not None


@pytest.fixture
def stepped_history(client, auth):
    """Six hours of a cron every ten minutes, of which crond ran none for two hours."""
    end = int(time.time()) // HOUR * HOUR - HOUR
    since = end - 6 * HOUR
    cron_id = new_cron(client, auth, "*/10 * * * *", since - HOUR)
    times = list(range(since, end, 600))
    skipped = {t for t in times if since + 2 * HOUR <= t < since + 4 * HOUR}
    history(client, auth, cron_id, times, skip=skipped)
    return cron_id, since, end, sorted(skipped)


def test_without_a_step_the_skipped_firings_are_missed(stepped_history):
    cron_id, since, end, skipped = stepped_history
    report = report_of(cron_id, since, end, end + 59)
    assert report["missed"] == skipped and report["verdict"] == "fail"


def test_the_gate_judges_firings_skipped_across_a_step_as_clock_step(stepped_history):
    cron_id, since, end, skipped = stepped_history
    with db.connected():
        _boot_step(since + 2 * HOUR - 30, 2 * HOUR - 60)  # the window holds the two hours
        report = report_of(cron_id, since, end, end + 59)
    assert defects(report) == {} and report["verdict"] == "pass"
    assert report["clock_step"] == len(skipped) == 12
    assert report["expected"] == report["runs"] + 12
    assert any("fell in a step of the clock" in reason and "+7140 s" in reason
               for reason in report["reasons"])


def test_the_reconcile_table_has_a_clock_step_column(stepped_history):
    from qlshadow.cli.gate_report import format_report
    from qlshadow.watch.reconcile import reconcile
    cron_id, since, end, skipped = stepped_history
    with db.connected():
        _boot_step(since + 2 * HOUR - 30, 2 * HOUR - 60)
        data = reconcile(since, end, cron_id, now=end + 59)
    header, row = format_report(data).splitlines()[1:3]
    counted = header.split()[3:]  # the columns after cron, name and schedule (which has spaces)
    cells = dict(zip(counted, row.split()[-len(counted):], strict=True))
    assert (cells["clock_step"], cells["missed"], cells["verdict"]) == ("12", "0", "pass")


def test_a_clock_set_back_runs_minutes_again_and_that_is_no_double(client, auth):
    end = int(time.time()) // HOUR * HOUR - HOUR
    since = end - 6 * HOUR
    cron_id = new_cron(client, auth, "*/10 * * * *", since - HOUR)
    times = list(range(since, end, 600))
    history(client, auth, cron_id, times)
    again = [t for t in times if since + 3 * HOUR <= t < since + 4 * HOUR]
    for t in again:  # crond ran them again after the clock went back an hour
        fire(client, auth, cron_id, t, delay=20)
    assert [d["at"] for d in report_of(cron_id, since, end, end + 59)["double"]] == again
    with db.connected():
        _boot_step(since + 4 * HOUR - 30, -HOUR)
    report = report_of(cron_id, since, end, end + 59)
    assert defects(report) == {} and report["clock_step"] == len(again) == 6


def _health(cron_id: int, now: int) -> dict:
    with db.connected():
        (found,) = read_all(now, cron_id=cron_id, count_missed=True)
    return found


def test_health_calls_no_firing_of_a_step_missed(client, auth):
    # Midway between two firings: the count does not hang on the minute the test runs in.
    now = int(time.time()) // 600 * 600 + 300
    cron_id = new_cron(client, auth, "*/10 * * * *", now - 6 * HOUR)
    start = now - 6 * HOUR + 600
    # The router ran it until two hours ago, then booted with its clock two hours behind;
    # NTP stepped it forward just now. crond ran nothing in between.
    history(client, auth, cron_id, range(start - start % 600, now - 2 * HOUR, 600))
    before = _health(cron_id, now)
    assert before["state"] == "missed" and before["missed_recent"] == 12
    with db.connected():
        _boot_step(now - 2 * HOUR - 30, 2 * HOUR - 60)
    after = _health(cron_id, now)
    assert after["state"] == "ok" and after["missed_recent"] == 0


FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"  # Debian's faketime package


@pytest.mark.slow  # the service looks at the clocks once a minute
@pytest.mark.skipif(not os.path.exists(FAKETIME) and os.environ.get("CI") != "true",
                    reason="needs libfaketime: apt-get install faketime")
def test_a_running_service_records_a_step_of_its_real_clock(live_server, make_settings, tmp_path):
    # libfaketime shifts the server's wall clock by what the file says, read at every call;
    # its boot clock stays the kernel's, as NTP's step leaves it.
    offset = tmp_path / "offset"
    offset.write_text("+0\n")
    server = live_server(LD_PRELOAD=FAKETIME, FAKETIME_TIMESTAMP_FILE=str(offset),
                         FAKETIME_NO_CACHE="1", DONT_FAKE_MONOTONIC="1")
    db.open_database(make_settings(), create=False)  # to read what the server wrote
    offset.write_text("+2h\n")
    assert wait_for(lambda: table_rows(ClockStep), 90, interval=1), server.output()
    (row,) = table_rows(ClockStep)
    assert abs(row["step"] - 7200) < 5
    assert row["hi"] - row["lo"] < 7200 + 61 + 5  # the step, widened by one minute at most
    assert "the wall clock stepped +72" in server.output()
