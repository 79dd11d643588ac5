"""Stored times as text for any 64-bit value: the helpers, and the page, the gate, /metrics and
the CLI when the database holds times the host's time_t cannot turn into local time.

On x86_64 time.localtime() fails past the year 2**31 (2**62 seconds here); tests/test_32bit.py
runs the same service on a 32-bit time_t, where it fails after 2038.
"""
from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qlshadow.storage import db
from qlshadow import timefmt
from qlshadow.core.auth import create_app_record
from qlshadow.cli.gate_report import format_report
from qlshadow.storage.models import Cron, RunningInstance, ShadowRun
from helpers import STATUS_PATH, cli_env, run_cli

pytestmark = pytest.mark.shadow_on

HUGE = 2**62  # 146138514283-06-19 07:45:04 UTC
HUGE_TEXT = "146138514283-06-19 07:45:04 UTC"
INT64_MAX = 2**63 - 1
EID = "legacy-system:{s}:{n:08x}-9d4a-4e6b-8f1a-2c3d4e5f6a7b"
# A POSIX TZ rule, as OpenWrt writes it (no zoneinfo files needed).
CET = "CET-1CEST,M3.5.0,M10.5.0/3"


@pytest.fixture
def local_zone(box_zone):
    """Local time is CET for the test, and the host's own again after it."""
    box_zone(CET)


# --- the helpers -------------------------------------------------------------------------

@given(st.integers(min_value=-62135596800, max_value=253402300799))  # years 1 to 9999
def test_utc_fields_agree_with_datetime_for_every_second_it_can_hold(seconds):
    expected = datetime(1970, 1, 1) + timedelta(seconds=seconds)

    assert timefmt.utc_fields(seconds) == (expected.year, expected.month, expected.day,
                                           expected.hour, expected.minute, expected.second)


@given(st.integers(min_value=-(2**63), max_value=INT64_MAX - 400 * 146097 * 86400))
def test_utc_fields_repeat_every_400_years_over_the_whole_64_bit_range(seconds):
    later = timefmt.utc_fields(seconds + 146097 * 86400)

    assert later == (timefmt.utc_fields(seconds)[0] + 400,) + timefmt.utc_fields(seconds)[1:]


@pytest.mark.parametrize("seconds, text", [
    (0, "1970-01-01 00:00:00 UTC"),
    (2**31 - 1, "2038-01-19 03:14:07 UTC"),
    (2**31, "2038-01-19 03:14:08 UTC"),
    (951782400, "2000-02-29 00:00:00 UTC"),
    (HUGE, HUGE_TEXT),
    (INT64_MAX, "292277026596-12-04 15:30:07 UTC"),
    (-1, "1969-12-31 23:59:59 UTC"),
])
def test_utc_text_is_exact_from_1970_to_the_ends_of_64_bits(seconds, text):
    assert timefmt.utc_text(seconds) == text


def test_local_text_is_the_local_time_with_its_zone(local_zone):
    assert timefmt.local_text(1700000000) == "2023-11-14 23:13:20 CET"
    assert timefmt.local_text(1690000000, with_seconds=False) == "2023-07-22 06:26 CEST"
    assert timefmt.local_text(1700000000, zone=False) == "2023-11-14 23:13:20"


@pytest.mark.parametrize("seconds", [HUGE, INT64_MAX, -(2**63)])
def test_local_text_falls_back_to_marked_utc_where_local_time_cannot_be_computed(
        local_zone, seconds):
    with pytest.raises((OverflowError, OSError, ValueError)):
        time.localtime(seconds)  # the case this covers, on this host

    assert timefmt.local_text(seconds) == timefmt.utc_text(seconds)
    assert timefmt.local_text(seconds, zone=False).endswith(" UTC")


def test_local_limit_is_the_last_second_local_time_reaches_here():
    limit = timefmt.local_limit()

    time.localtime(limit)
    assert limit == timefmt.LOCAL_CAP or limit == 2**31 - 1


def test_the_report_shows_a_window_past_local_time_in_utc():
    data = {"window": {"since": HUGE - 86400, "until": HUGE},
            "gate": {"verdict": "insufficient", "reasons": [], "failures": {}}, "crons": []}

    assert HUGE_TEXT in format_report(data)


# --- stored times the host cannot show ---------------------------------------------------

def _stored_far_times(client, auth, make_cron) -> int:
    """A cron with a Legacy instance and a Shadow Run, its times then set past local time.

    Written to the tables directly: the API may bound what it accepts, but rows written
    before (or by another version) still have to render.
    """
    cron_id = make_cron()["id"]
    for status in (0, 1):
        body = {"ids": [cron_id], "status": status, "pid": 4000, "last_execution_time": 1700000000,
                "last_running_time": 7, "execution_id": EID.format(s=1700000000, n=1)}
        if status == 1:
            body["exit_code"] = 0
        assert client.put(STATUS_PATH, json=body, headers=auth).status_code == 200
    with db.database.connection_context(), db.write_transaction():
        Cron.update(last_execution_time=HUGE).where(Cron.id == cron_id).execute()
        RunningInstance.update(started_at=HUGE, finished_at=INT64_MAX).execute()
        changed = ShadowRun.update(accepted_at=HUGE, started_after=0, created_after=0,
                                   finished_at=INT64_MAX)
        assert changed.execute() == 1
    return cron_id


def test_the_page_shows_stored_times_past_local_time_in_utc(client, auth, make_cron):
    cron_id = _stored_far_times(client, auth, make_cron)
    with db.database.connection_context(), db.write_transaction():
        viewer = create_app_record("viewer", ["crons", "runs"])
    client.post("/page/login", data={"client_id": viewer[0], "client_secret": viewer[1]})

    listing = client.get("/page/")
    detail = client.get(f"/page/crons/{cron_id}")

    minutes = HUGE_TEXT[:-7] + " UTC"  # the pages show minutes
    assert listing.status_code == 200 and minutes in listing.get_data(as_text=True)
    assert detail.status_code == 200
    assert detail.get_data(as_text=True).count(minutes) >= 3  # last start, execution, strip
    assert client.get("/page/gate").status_code == 200


def test_the_gate_and_metrics_answer_with_stored_times_past_local_time(client, auth, make_cron):
    _stored_far_times(client, auth, make_cron)
    with db.database.connection_context(), db.write_transaction():
        client_id, secret = create_app_record("prometheus", ["metrics"])
    token = client.get(f"/open/auth/token?client_id={client_id}&client_secret={secret}")

    gate = client.get("/open/reconcile", headers=auth)
    scrape = client.get("/metrics", headers={
        "Authorization": f"Bearer {token.get_json()['data']['token']}"})

    assert gate.status_code == 200, gate.get_json()
    assert scrape.status_code == 200
    assert f"}} {INT64_MAX}" in scrape.get_data(as_text=True)


# Far past the API's time range (parse.TIME_MAX) and past what datetime and cronsim reach
# (the year 9999): one 400 naming until, never a 500.
@pytest.mark.parametrize("until", [timefmt.LOCAL_CAP + 1, 253402300000, 281474976710])
def test_a_gate_window_past_local_time_is_a_400_naming_until(client, auth, until):
    response = client.get(f"/open/reconcile?since={until - 86400}&until={until}", headers=auth)

    assert response.status_code == 400
    assert response.get_json()["message"].startswith("'until' must be")


def test_the_gate_reaches_up_to_the_limit_it_names(client, auth, make_cron):
    from qlshadow.parse import TIME_MAX
    make_cron()
    # The API's time range, or the host's last local second (less two days) when sooner.
    limit = min(timefmt.local_limit() - 2 * 86400, TIME_MAX)

    response = client.get(f"/open/reconcile?since={limit - 86400}&until={limit}", headers=auth)

    assert response.status_code == 200, response.get_json()
    assert str(limit) in client.get(f"/open/reconcile?since={limit - 86400}&until={limit + 1}",
                                    headers=auth).get_json()["message"]


def test_the_cli_gate_past_local_time_exits_2_naming_until(settings, client, auth, make_cron):
    make_cron()

    done = run_cli(cli_env(settings), "reconcile", "--since", str(HUGE - 86400),
                   "--until", str(HUGE), check=False)

    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "'4611686018427301504' is not a time" in done.stderr


def test_the_next_firing_a_reason_names_stops_at_the_hosts_last_local_second():
    from qlshadow.watch.firing_times import MAX_WINDOW, next_firing
    limit = timefmt.local_limit()

    near = next_firing("*/5 * * * *", limit - 2 * 86400, limit + MAX_WINDOW)

    assert near is not None and limit - 2 * 86400 < near <= limit - 2 * 86400 + 300
    assert next_firing("*/5 * * * *", limit - 60, limit + MAX_WINDOW) is None
