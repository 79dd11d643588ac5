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
from reconcile_history import fire, new_cron, report_of
from qlshadow.cli.cmd_status import open_line

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
        ids = {i: n for i, (n, _first, _last) in per_host.get(cron_id, {}).items()}
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


# --- an open Run's finish is lost only once its own host started the cron again -------------

def open_run_words(client, auth, cron_id: int) -> dict:
    """{host: condition} of the cron's open Runs as GET /open/runs words them."""
    runs = client.get(f"/open/runs?cron_id={cron_id}&state=running",
                      headers=auth).get_json()["data"]
    return {r["host"]: r["condition"] for r in runs}


def gate_open(cron_id: int) -> dict:
    report = report_of(cron_id, BASE - 3600, BASE + 60, now=NOW)
    return {k: report[k] for k in ("running", "stuck", "finish_lost")}


@on_postgres
@pytest.mark.parametrize("mode", ["each", "one"])
def test_a_later_run_on_another_host_does_not_lose_an_open_runs_finish_on_any_surface(
        client, auth, settings, nas, mode):
    cron_id = fleet_cron(client, auth, [settings.host_name, "nas"], mode)
    history(client, auth, cron_id, skip={BASE - 600, BASE})
    fire(client, auth, cron_id, BASE - 600, finish=False)  # still running on the first host
    history(nas, auth, cron_id, pid=7000, delay=2)
    with db.connected(), db.write_transaction():
        Cron.update(max_runtime=3600).where(Cron.id == cron_id).execute()
    # /open/runs judges by the real clock: past its max_runtime, not a lost finish.
    assert open_run_words(client, auth, cron_id) == {settings.host_name: "stuck"}
    assert gate_open(cron_id) == {"running": 1, "stuck": 0, "finish_lost": 0}
    rows = [health.public(h) for h in health_rows(NOW)]
    assert open_line(rows) == "open executions: 1 running, 0 stuck, 0 finish lost"

    fire(client, auth, cron_id, BASE)  # the first host starts it again: its finish was lost
    assert open_run_words(client, auth, cron_id) == {settings.host_name: "finish_lost"}
    assert gate_open(cron_id) == {"running": 0, "stuck": 0, "finish_lost": 1}
    rows = [health.public(h) for h in health_rows(NOW)]
    assert open_line(rows) == "open executions: 0 running, 0 stuck, 1 finish lost"


@on_postgres
def test_of_two_open_runs_on_one_host_the_older_is_lost_and_the_newer_runs(
        client, auth, settings, nas):
    cron_id = fleet_cron(client, auth, ["*"])
    fire(client, auth, cron_id, BASE - 1200, finish=False)
    fire(client, auth, cron_id, BASE - 600, finish=False)
    fire(nas, auth, cron_id, BASE, pid=7000, delay=2, finish=False)
    with db.connected(), db.write_transaction():
        Cron.update(max_runtime=3600).where(Cron.id == cron_id).execute()
    assert gate_open(cron_id) == {"running": 2, "stuck": 0, "finish_lost": 1}
    words = client.get(f"/open/runs?cron_id={cron_id}", headers=auth).get_json()["data"]
    assert sorted((r["host"], r["condition"]) for r in words) == [
        ("nas", "stuck"), (settings.host_name, "finish_lost"), (settings.host_name, "stuck")]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_on_sqlite_any_later_run_still_proves_a_lost_finish(client, auth, settings):
    cron_id = fleet_cron(client, auth, ["*"])
    fire(client, auth, cron_id, BASE - 600, finish=False)
    with db.connected(), db.write_transaction():
        Cron.update(max_runtime=3600).where(Cron.id == cron_id).execute()
    assert gate_open(cron_id) == {"running": 1, "stuck": 0, "finish_lost": 0}
    fire(client, auth, cron_id, BASE)
    assert open_run_words(client, auth, cron_id) == {settings.host_name: "finish_lost"}
    assert gate_open(cron_id) == {"running": 0, "stuck": 0, "finish_lost": 1}
    rows = [health.public(h) for h in health_rows(NOW)]
    assert open_line(rows) == "open executions: 0 running, 0 stuck, 1 finish lost"


def health_rows(now: int) -> list:
    with db.connected():
        return health.read_all(now)


# --- a host that stopped: its firings after its last tick are its silence ---------------------

@pytest.fixture
def clock(monkeypatch):
    """Sets the clock GET /open/crons/health judges by."""
    import types

    from qlshadow.watch.health import crons

    def at(now: int) -> None:
        monkeypatch.setattr(crons, "time", types.SimpleNamespace(time=lambda: now))
    return at


def api_health(client, auth, cron_id: int) -> dict:
    (found,) = [h for h in client.get("/open/crons/health", headers=auth).get_json()["data"]
                if h["cron_id"] == cron_id]
    return found


@on_postgres
def test_a_stopped_hosts_firings_after_its_last_tick_are_not_missed_and_it_goes_silent(
        client, auth, settings, nas, clock, monkeypatch):
    from test_alerts import PROXY_VARIABLES, channels_of, titles
    from receivers import Receiver
    from qlshadow.watch.alerts import tick
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    cron_id = fleet_cron(client, auth, [settings.host_name, "nas"])
    history(client, auth, cron_id)
    history(nas, auth, cron_id, skip={BASE}, pid=7000)
    last_tick = BASE - 30  # nas stopped after this tick: the firing at BASE came after it
    with db.connected(), db.write_transaction():
        Host.update(last_seen=last_tick).where(Host.name == "nas").execute()
    receiver = Receiver()
    try:
        channels = channels_of(receiver)
        for now in (NOW, BASE + 150, last_tick + fleet.SILENT_AFTER):
            with db.connected(), db.write_transaction():
                fleet.record_host(settings.host_name, now=now)  # this host ticks on
            assert state_of(cron_id, now, count_missed=True)["missed_recent"] == 0
            clock(now)
            assert api_health(client, auth, cron_id)["state"] == "ok", now
            tick(settings, channels, now)
            with db.connected():
                hosts = {h["name"]: h["state"] for h in fleet.hosts_listing(now)}
            assert hosts == {settings.host_name: "ok", "nas": "ok"}
        silent = last_tick + fleet.SILENT_AFTER + 1  # at 180 s, as before
        with db.connected(), db.write_transaction():
            fleet.record_host(settings.host_name, now=silent)
        tick(settings, channels, silent)
        with db.connected():
            assert {h["name"]: h["state"] for h in fleet.hosts_listing(silent)}["nas"] == "silent"
        assert titles(receiver) == ["qlshadow: host nas is silent"]  # and no missed firing
        # Seen again without having run it: the firing at BASE is its miss.
        with db.connected(), db.write_transaction():
            fleet.record_host("nas", now=silent + 60)
        h = state_of(cron_id, silent + 60)
        assert (h["state"], h["missed_hosts"], h["missed_firing"]) == ("missed", ["nas"], BASE)
    finally:
        receiver.close()


@on_postgres
def test_a_live_hosts_firing_without_a_run_is_still_missed(client, auth, settings, nas, clock):
    cron_id = fleet_cron(client, auth, [settings.host_name, "nas"])
    history(client, auth, cron_id)
    history(nas, auth, cron_id, skip={BASE}, pid=7000)
    with db.connected(), db.write_transaction():
        Host.update(last_seen=BASE + 60).where(Host.name == "nas").execute()  # ticks on
    clock(NOW)
    h = api_health(client, auth, cron_id)
    assert h["state"] == "missed" and "on host nas" in h["reason"]
    assert state_of(cron_id, count_missed=True)["missed_recent"] == 1
    # Seen in the firing's very second is seen at it: the firing counts.
    with db.connected(), db.write_transaction():
        Host.update(last_seen=BASE).where(Host.name == "nas").execute()
    assert state_of(cron_id)["state"] == "missed"
