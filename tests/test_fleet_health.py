"""Health per host (watch/health/): an `each` cron on several hosts sharing one PostgreSQL
database is missed or late on the host that has no record of a firing; a `one` cron is
judged once per firing over every host's executions; on SQLite (one host) nothing changes.

Two real hosts: the app fixture's (its QL_HOST_NAME) and a second app on the same database
named "nas"; each execution goes through its own host's status callback, as task.sh sends
it, so Runs and instances carry the host ids the service gives them.
"""
from __future__ import annotations

import json

import pytest

from qlshadow.core import fleet
from qlshadow.storage import db
from qlshadow.storage.models import Cron, Host
from qlshadow.watch import health
from qlshadow.web.views import create_app
from helpers import SHADOW_ON
from reconcile_history import fire, new_cron

BASE = 1764460800  # 2025-11-30 00:00 UTC: a firing of */10
NOW = BASE + 120  # the firing at BASE is past its grace (60 s)
pytestmark = [pytest.mark.shadow_on, pytest.mark.usefixtures("utc_box")]
on_postgres = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


@pytest.fixture
def nas(app, make_settings):
    """A second host on the same database: its test client."""
    return create_app(make_settings(QL_HOST_NAME="nas", **SHADOW_ON)).test_client()


def fleet_cron(client, auth, hosts: list, mode: str = "each", grace=None) -> int:
    """A */10 cron made an hour before BASE, naming hosts; every host seen since a day before."""
    cron_id = new_cron(client, auth, "*/10 * * * *", BASE - 3600)
    with db.connected(), db.write_transaction():
        (Cron.update(hosts=json.dumps(hosts), hosts_mode=None if mode == "each" else mode,
                     grace=grace).where(Cron.id == cron_id).execute())
        Host.update(first_seen=BASE - 86400).execute()
    return cron_id


def history(client, auth, cron_id: int, skip=(), **kw) -> None:
    """One execution per firing from an hour before BASE to BASE, except those in skip."""
    for at in range(BASE - 3000, BASE + 1, 600):
        if at not in skip:
            fire(client, auth, cron_id, at, **kw)


def state_of(cron_id: int, now: int = NOW, **kw) -> dict:
    with db.connected():
        (found,) = [h for h in health.read_all(now, **kw) if h["cron_id"] == cron_id]
    return found


@on_postgres
@pytest.mark.parametrize("mode, state", [("each", "missed"), ("one", "ok")])
def test_a_firing_one_host_missed_is_its_miss_for_each_and_none_for_one(
        client, auth, settings, nas, mode, state):
    cron_id = fleet_cron(client, auth, [settings.host_name, "nas"], mode)
    history(client, auth, cron_id)
    history(nas, auth, cron_id, skip={BASE}, pid=7000)
    h = state_of(cron_id)
    assert h["state"] == state
    if mode == "each":
        assert h["missed_firing"] == BASE and h["missed_hosts"] == ["nas"]
        assert h["since"] == BASE + 60
        assert "has no record on host nas 60 s after it" in h["reason"]
        assert "missed_hosts" not in health.public(h)
    else:
        assert "missed_firing" not in h and "on host" not in h["reason"]


@on_postgres
@pytest.mark.parametrize("mode", ["each", "one"])
def test_both_hosts_ran_every_firing_is_ok(client, auth, settings, nas, mode):
    cron_id = fleet_cron(client, auth, [settings.host_name, "nas"], mode)
    history(client, auth, cron_id)
    history(nas, auth, cron_id, pid=7000)  # the same seconds as the first host's
    h = state_of(cron_id, count_missed=True)
    assert (h["state"], h["missed_recent"]) == ("ok", 0)
    with db.connected():
        per_host = health.judge_per_host(list(Cron.select().dicts()), NOW)
        ids = {i: n for i, (n, _seen) in per_host.get(cron_id, {}).items()}
        recent = health.recent_executions([cron_id], True, {cron_id: 2} if ids else None)
    executions = recent[cron_id]
    assert len(executions) == 12  # six firings on two hosts, none merged across hosts
    if mode == "each":
        assert sorted(ids.values()) == sorted([settings.host_name, "nas"])
        assert sorted(ids[e.host] for e in executions).count("nas") == 6
        assert all(e.scheduled for e in executions)
    else:
        assert ids == {}


@on_postgres
def test_every_host_of_a_star_cron_is_judged_and_its_misses_are_counted_per_host(
        client, auth, settings, nas):
    cron_id = fleet_cron(client, auth, ["*"])
    history(client, auth, cron_id, skip={BASE - 600})
    history(nas, auth, cron_id, skip={BASE - 1200, BASE - 600}, pid=7000)
    # Both hosts ran the firing at BASE: nothing is missed now.
    assert state_of(cron_id)["state"] == "ok"
    # Before it, the firing at BASE - 600 was missed on both, and nas missed the one before.
    h = state_of(cron_id, BASE - 480, count_missed=True)
    assert h["state"] == "missed" and h["missed_hosts"] == sorted([settings.host_name, "nas"])
    # The reason names the first firing missed and the hosts that missed it.
    assert h["missed_firing"] == BASE - 1200 and "no record on host nas 60 s" in h["reason"]
    assert h["missed_recent"] == 3  # one on the first host, two on nas


@on_postgres
def test_a_firing_one_host_has_not_run_yet_is_late_naming_it(client, auth, settings, nas):
    cron_id = fleet_cron(client, auth, [settings.host_name, "nas"], grace=300)
    history(client, auth, cron_id)
    history(nas, auth, cron_id, skip={BASE}, pid=7000)
    h = state_of(cron_id)
    assert h["state"] == "late" and "no record yet on host nas" in h["reason"]
    assert state_of(cron_id, BASE + 301)["state"] == "missed"


@on_postgres
def test_a_silent_hosts_misses_are_left_to_its_own_alert(client, auth, settings, nas):
    cron_id = fleet_cron(client, auth, [settings.host_name, "nas"])
    history(client, auth, cron_id)
    history(nas, auth, cron_id, skip={BASE}, pid=7000)
    with db.connected(), db.write_transaction():
        Host.update(last_seen=NOW - fleet.SILENT_AFTER - 1).where(Host.name == "nas").execute()
    assert state_of(cron_id)["state"] == "ok"
    with db.connected(), db.write_transaction():
        Host.update(last_seen=NOW).where(Host.name == "nas").execute()
    assert state_of(cron_id)["state"] == "missed"  # seen again: the firing it missed counts


@on_postgres
def test_a_later_start_on_another_host_neither_ends_nor_excuses_an_open_run(
        client, auth, settings, nas):
    cron_id = fleet_cron(client, auth, [settings.host_name, "nas"])
    history(client, auth, cron_id, skip={BASE - 600, BASE})
    fire(client, auth, cron_id, BASE - 600, finish=False)  # still running on the first host
    # A second later than the first host (the helper dates finishes by cron and start).
    history(nas, auth, cron_id, pid=7000, delay=2)
    with db.connected(), db.write_transaction():
        Cron.update(max_runtime=3600).where(Cron.id == cron_id).execute()
    h = state_of(cron_id)
    # Its crond skips the firing at BASE (the line is still running there): not missed,
    # and the run is not taken as a lost finish because nas started one later.
    assert h["state"] == "ok", h["reason"]
    assert h["open"] == {"running": 1, "stuck": 0, "finish_lost": 0}


@on_postgres
def test_a_host_that_joined_later_is_judged_from_then(client, auth, settings, nas):
    cron_id = fleet_cron(client, auth, [settings.host_name, "nas"])
    history(client, auth, cron_id)
    with db.connected(), db.write_transaction():
        Host.update(first_seen=BASE - 30).where(Host.name == "nas").execute()
    assert state_of(cron_id, BASE + 59)["state"] == "ok"  # nas's first firing: its minute
    h = state_of(cron_id, BASE + 60)
    assert h["state"] == "missed" and h["missed_hosts"] == ["nas"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_on_sqlite_one_host_is_judged_as_before(client, auth, settings):
    cron_id = fleet_cron(client, auth, ["*"])
    with db.connected(), db.write_transaction():
        fleet.record_host("nas", BASE)  # even a second name recorded changes nothing
    history(client, auth, cron_id, skip={BASE})
    with db.connected():
        assert health.judge_per_host(list(Cron.select().dicts()), NOW) == {}
        recent = health.recent_executions([cron_id], True)[cron_id]
    assert all(e.host is None for e in recent) and len(recent) == 5
    h = state_of(cron_id)
    assert (h["state"], h["since"], h["missed_firing"]) == ("missed", BASE + 60, BASE)
    assert "missed_hosts" not in h
    assert h["reason"].endswith("has no record 60 s after it: crond did not start it, or its "
                                "callbacks were lost.")
