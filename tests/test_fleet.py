"""A fleet on one database: host names, the hosts each cron names, each host's own crontab
block, and the hosts list (core/fleet.py). Real databases, both backends."""
from __future__ import annotations

import json
import os
import socket

import pytest

from qlshadow import config
from qlshadow.core import fleet
from qlshadow.host import crontab
from qlshadow.service import fleet as fleet_tick
from qlshadow.storage import db
from qlshadow.storage.models import Cron, Host
from qlshadow.web.views import create_app
from helpers import http
from shellenv import wait_for


# --- QL_HOST_NAME ---------------------------------------------------------------------------

def test_the_host_name_defaults_to_the_systems():
    assert config.load(environ={}).host_name == socket.gethostname()


@pytest.mark.parametrize("name", ["router", "nas-2.lan", "pi_4", "a" * 63])
def test_a_host_name_of_letters_digits_and_dot_hyphen_underscore_is_taken(name):
    assert config.load(environ={"QL_HOST_NAME": name}).host_name == name


@pytest.mark.parametrize("name", ["a" * 64, "two words", "*", "nas/2", "réseau"])
def test_a_bad_host_name_is_a_config_error_naming_the_key(name):
    with pytest.raises(config.ConfigError, match="QL_HOST_NAME"):
        config.load(environ={"QL_HOST_NAME": name})


# --- the hosts table ------------------------------------------------------------------------

def test_a_host_records_itself_when_it_starts(app, settings):
    with db.database.connection_context():
        (row,) = list(Host.select().dicts())
    assert row["name"] == settings.host_name
    assert row["first_seen"] <= row["last_seen"]


def test_each_start_updates_last_seen_and_keeps_one_row(make_settings):
    first = create_app(make_settings(QL_HOST_NAME="router"))
    with db.database.connection_context(), db.write_transaction():
        Host.update(last_seen=5, first_seen=5).execute()
    create_app(make_settings(QL_HOST_NAME="router"))
    with db.database.connection_context():
        rows = list(Host.select().dicts())
    db.discard_connection()
    assert first is not None
    assert len(rows) == 1 and rows[0]["first_seen"] == 5 and rows[0]["last_seen"] > 5


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_start_on_sqlite_goes_on_when_its_host_row_cannot_be_written(make_settings):
    # As on a full partition: the one host's row cannot be written (a trigger refuses it).
    import sqlite3

    from qlshadow.core.runtime import KEY
    settings = make_settings(QL_HOST_NAME="router")
    create_app(settings)
    db.discard_connection()
    with sqlite3.connect(config.sqlite_file(settings.db_url)) as conn:
        for event in ("INSERT", "UPDATE"):
            conn.execute(f"CREATE TRIGGER no_host_{event.lower()} BEFORE {event} ON hosts "
                         "BEGIN SELECT RAISE(FAIL, 'database or disk is full'); END")
    app = create_app(make_settings(QL_HOST_NAME="router"))
    db.discard_connection()
    assert app.extensions[KEY].host_id is None


def test_runs_carry_no_host_on_sqlite_and_this_hosts_id_on_postgresql(app, backend):
    from qlshadow.core.runtime import KEY
    host_id = app.extensions[KEY].host_id
    if backend == "sqlite":
        assert host_id is None
    else:
        with db.database.connection_context():
            assert Host.get_by_id(host_id).name == app.extensions["qlshadow"].host_name


# --- each cron names its hosts --------------------------------------------------------------

def test_a_cron_made_without_hosts_runs_on_the_host_that_made_it(make_cron, settings):
    cron = make_cron()
    assert (cron["hosts"], cron["hosts_mode"]) == ([settings.host_name], "each")


def test_a_cron_may_name_every_host_and_one_at_a_time(make_cron):
    cron = make_cron(hosts=["*"], hosts_mode="one")
    assert (cron["hosts"], cron["hosts_mode"]) == (["*"], "one")


def test_hosts_are_kept_sorted_once_each(make_cron):
    assert make_cron(hosts=["nas", "router", "nas"])["hosts"] == ["nas", "router"]


@pytest.mark.parametrize("body, word", [
    ({"hosts": []}, "'hosts'"), ({"hosts": "router"}, "'hosts'"),
    ({"hosts": ["*", "nas"]}, "stands alone"), ({"hosts": ["two words"]}, "not a host name"),
    ({"hosts": [3]}, "not a host name"), ({"hosts_mode": "all"}, "'hosts_mode'"),
    ({"hosts_mode": None}, "'hosts_mode'")])
def test_bad_hosts_are_a_400_with_one_sentence_and_nothing_written(client, auth, body, word):
    response = client.post("/open/crons", json={"name": "x", "command": "true",
                                                "schedule": "* * * * *", **body}, headers=auth)
    assert response.status_code == 400
    message = response.get_json()["message"]
    assert word in message and message.count(". ") == 0
    with db.database.connection_context():
        assert Cron.select().count() == 0


def test_an_update_changes_the_hosts_and_leaves_the_definition_date(client, auth, make_cron):
    cron = make_cron()
    response = client.put("/open/crons", json={"id": cron["id"], "hosts": ["nas"],
                                               "hosts_mode": "one"}, headers=auth)
    changed = response.get_json()["data"]
    assert (changed["hosts"], changed["hosts_mode"]) == (["nas"], "one")
    assert changed["updatedAt"] == cron["updatedAt"]


def test_the_cli_adds_a_cron_with_hosts_and_mode(make_settings):
    from helpers import cli_env, run_cli
    settings = make_settings(QL_HOST_NAME="router")
    create_app(settings)
    out = run_cli(cli_env(settings), "cron", "add", "--json", "--hosts", "nas,router",
                  "--hosts-mode", "one", "*/5 * * * *", "true").stdout
    cron = json.loads(out)
    assert (cron["hosts"], cron["hosts_mode"]) == (["nas", "router"], "one")
    refused = run_cli(cli_env(settings), "cron", "add", "--hosts", "a b", "* * * * *", "true",
                      check=False)
    assert refused.returncode != 0 and "not a host name" in refused.stderr


# --- each host's crontab block --------------------------------------------------------------

def block_commands(settings, rows) -> list:
    text, _ = crontab.render_rows(settings, rows)
    return [line for line in text.splitlines() if "task.sh" in line]


def test_a_hosts_block_holds_only_the_crons_that_name_it(app, make_settings):
    rows = [{"id": 1, "name": "a", "command": "echo router", "schedule": "* * * * *",
             "hosts": '["router"]'},
            {"id": 2, "name": "b", "command": "echo all", "schedule": "* * * * *",
             "hosts": '["*"]'},
            {"id": 3, "name": "c", "command": "echo old", "schedule": "* * * * *",
             "hosts": None},
            {"id": 4, "name": "d", "command": "echo nas", "schedule": "* * * * *",
             "hosts": '["nas"]', "hosts_mode": "one"}]
    router = block_commands(make_settings(QL_HOST_NAME="router", QL_SCHEDULER="system"), rows)
    nas = block_commands(make_settings(QL_HOST_NAME="nas", QL_SCHEDULER="system"), rows)
    assert [line.rsplit(" ", 1)[-1] for line in router] == ["router'", "all'", "old'"]
    assert [line.rsplit(" ", 1)[-1] for line in nas] == ["all'", "old'", "nas'"]
    assert "QL_CLAIM=1" in nas[-1] and not any("QL_CLAIM" in line for line in router)


def test_a_change_of_hosts_raises_the_block_revision_of_each_host_it_touches(
        make_settings, client, auth, make_cron):
    for name in ("nas", "pi"):  # two more hosts on the same database
        create_app(make_settings(QL_HOST_NAME=name))
    db.discard_connection()

    def wanted() -> dict:
        with db.database.connection_context():
            return dict(Host.select(Host.name, Host.block_wanted).tuples())
    before = wanted()
    cron = make_cron(hosts=["nas"])
    after_add = wanted()
    client.put("/open/crons", json={"id": cron["id"], "hosts": ["pi"]}, headers=auth)
    after_move = wanted()
    assert after_add["nas"] == before["nas"] + 1 and after_add["pi"] == before["pi"]
    assert after_move["nas"] == after_add["nas"] + 1 and after_move["pi"] == after_add["pi"] + 1


def test_a_host_installs_its_own_block_at_its_tick_once_a_change_named_it(
        make_settings, tmp_path, client, auth, make_cron, backend):
    nas = make_settings(QL_HOST_NAME="nas", QL_SCHEDULER="system",
                        QL_DATA_DIR=str(tmp_path / "nas"),
                        QL_CRONTAB_FILE=str(tmp_path / "nas" / "crontab.list"))
    create_app(nas)
    db.discard_connection()
    make_cron(command="echo for-nas", hosts=["nas"])
    with db.database.connection_context():
        if backend == "sqlite":  # one host: its own cron changes install its block
            assert fleet_tick.tick(nas) is None
            assert not os.path.exists(nas.crontab_file)
            return
        assert fleet_tick.tick(nas) is not None  # behind: installed
        assert fleet_tick.tick(nas) is None  # up to date: one upsert, nothing else
    with open(nas.crontab_file, encoding="utf-8") as fh:
        assert "echo for-nas" in fh.read()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_served_host_on_a_picked_port_reinstalls_its_block_with_that_port(
        make_settings, live_server, tmp_path):
    # QL_PORT=0 picks a free port: the block its tick installs again after another host's
    # change must call that port, not port 0 (every callback would fail until a restart).
    server = live_server(QL_HOST_NAME="nas", QL_SCHEDULER="system")
    create_app(make_settings(QL_HOST_NAME="pi"))  # a second host: a fleet
    runner_env = os.path.join(server.env["QL_DATA_DIR"], crontab.RUNNER_ENV)
    assert not os.path.exists(runner_env)  # a lone host with no cron installed nothing yet
    with db.database.connection_context(), db.write_transaction():
        Host.update(block_wanted=Host.block_wanted + 1).where(Host.name == "nas").execute()
    db.discard_connection()

    status, _ = http("POST", server.url + "/open/notify/tick", headers=server.headers)

    assert status == 202
    assert wait_for(lambda: os.path.exists(runner_env), timeout=30, interval=0.2)
    with open(runner_env, encoding="utf-8") as fh:
        assert f"ql_base_url=http://127.0.0.1:{server.port}\n" in fh.read()


# --- GET /open/hosts ------------------------------------------------------------------------

def test_the_hosts_list_names_each_host_with_its_crons_and_state(
        client, auth, make_cron, settings, backend):
    mine = make_cron()
    everywhere = make_cron(hosts=["*"])
    with db.database.connection_context(), db.write_transaction():
        fleet.record_host("far-away", now=1000)
    hosts = {h["name"]: h for h in client.get("/open/hosts", headers=auth).get_json()["data"]}
    assert hosts[settings.host_name]["crons"] == [mine["id"], everywhere["id"]]
    assert hosts[settings.host_name]["state"] == "ok"
    assert hosts["far-away"]["crons"] == [everywhere["id"]]
    assert hosts["far-away"]["state"] == ("ok" if backend == "sqlite" else "silent")


# --- every execution says where it ran ------------------------------------------------------

@pytest.mark.shadow_on
def test_a_single_hosts_runs_and_instances_name_it(client, auth, settings):
    from reconcile_history import fire, new_cron
    cron_id = new_cron(client, auth, "* * * * *", 1000)
    fire(client, auth, cron_id, 1_767_225_600)
    (run,) = client.get("/open/runs", headers=auth).get_json()["data"]
    (instance,) = client.get(f"/open/crons/{cron_id}/instances", headers=auth).get_json()["data"]
    assert run["host"] == instance["host"] == settings.host_name
    mine = client.get(f"/open/runs?host={settings.host_name}", headers=auth).get_json()["data"]
    assert [r["id"] for r in mine] == [run["id"]]
    assert client.get("/open/runs?host=nowhere", headers=auth).get_json()["data"] == []


@pytest.mark.shadow_on
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_each_hosts_runs_name_it_and_filter_by_it(client, auth, settings, make_settings):
    from helpers import SHADOW_ON
    from reconcile_history import fire, new_cron
    other = create_app(make_settings(QL_HOST_NAME="far-away", **SHADOW_ON)).test_client()
    cron_id = new_cron(client, auth, "* * * * *", 1000)
    fire(client, auth, cron_id, 1_767_225_600)
    fire(other, auth, cron_id, 1_767_225_600)
    runs = client.get("/open/runs", headers=auth).get_json()["data"]
    assert sorted(r["host"] for r in runs) == sorted([settings.host_name, "far-away"])
    theirs = client.get("/open/runs?host=far-away", headers=auth).get_json()["data"]
    assert [r["host"] for r in theirs] == ["far-away"]
    instances = client.get(f"/open/crons/{cron_id}/instances?host=far-away",
                           headers=auth).get_json()["data"]
    assert [i["host"] for i in instances] == ["far-away"]
    from helpers import cli_env, run_cli
    env = {**cli_env(settings), **SHADOW_ON}
    listed = json.loads(run_cli(env, "runs", "--host", "far-away", "--json").stdout)["data"]
    assert [r["host"] for r in listed] == ["far-away"]
    table = run_cli(env, "runs").stdout.splitlines()
    assert table[0].split()[-1] == "host"
    assert sorted(line.split()[-1] for line in table[1:3]) == sorted(
        [settings.host_name, "far-away"])


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("pid", [4242, None])
def test_a_finish_closes_only_the_instance_its_own_host_opened(client, auth, settings,
                                                                make_settings, pid):
    # Two hosts number their processes apart: the same pid (or none) on each is two
    # executions, and the first host's finish must leave the other's running.
    from reconcile_history import callback, new_cron
    other = create_app(make_settings(QL_HOST_NAME="far-away")).test_client()
    cron_id = new_cron(client, auth, "* * * * *", 1000)
    for host in (client, other):
        callback(host, auth, cron_id, 0, 1_767_225_660, pid)
    callback(client, auth, cron_id, 1, 1_767_225_660, pid)
    instances = client.get(f"/open/crons/{cron_id}/instances", headers=auth).get_json()["data"]
    assert {i["host"]: i["status"] for i in instances} == {"far-away": 0,
                                                           settings.host_name: 1}


@pytest.mark.shadow_on
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("mode, double", [("each", 0), ("one", 1)])
def test_the_gate_judges_each_crons_per_host_and_one_crons_per_firing(
        client, auth, make_settings, mode, double):
    from helpers import SHADOW_ON
    from reconcile_history import fire, new_cron, report_of
    other = create_app(make_settings(QL_HOST_NAME="far-away", **SHADOW_ON)).test_client()
    t = 1_767_225_600
    cron_id = new_cron(client, auth, "* * * * *", t - 60)
    client.put("/open/crons", json={"id": cron_id, "hosts": ["*"], "hosts_mode": mode},
               headers=auth)
    fire(client, auth, cron_id, t)
    fire(other, auth, cron_id, t)
    report = report_of(cron_id, t - 60, t + 60, now=t + 600)
    assert len(report["double"]) == double


def test_metrics_name_the_host_and_each_host_of_the_fleet(app, client, settings):
    from test_metrics import metrics_token
    text = client.get("/metrics", headers={"Authorization": f"Bearer {metrics_token(settings)}"}
                      ).get_data(True)
    assert f'host="{settings.host_name}"' in text.split("qlshadow_build_info{")[1].split("}")[0]
    assert f'qlshadow_fleet_host_silent{{host="{settings.host_name}"}} 0' in text


# --- a host going silent and coming back ----------------------------------------------------

@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_host_going_silent_and_back_is_told_once_each_for_the_whole_fleet(
        settings, make_settings, monkeypatch):
    from test_alerts import PROXY_VARIABLES, channels_of, titles
    from receivers import Receiver
    from qlshadow.watch.alerts import tick
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    create_app(make_settings(QL_HOST_NAME="nas"))
    receiver = Receiver()
    try:
        channels = channels_of(receiver)
        with db.database.connection_context(), db.write_transaction():
            seen = Host.get(Host.name == "nas").last_seen
        later = seen + fleet.SILENT_AFTER + 60
        with db.database.connection_context(), db.write_transaction():
            fleet.record_host(settings.host_name, now=later)  # this host ticks on
        for _ in range(3):  # the ticks of every host: one of them tells it
            tick(settings, channels, later)
        with db.database.connection_context(), db.write_transaction():
            fleet.record_host("nas", now=later + 60)  # nas ticks again
        for _ in range(3):
            tick(settings, channels, later + 60)
        assert titles(receiver) == ["qlshadow: host nas is silent", "qlshadow: host nas is back"]
    finally:
        receiver.close()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_health_page_lists_the_hosts_of_a_fleet(client, token, make_settings, settings):
    create_app(make_settings(QL_HOST_NAME="nas"))
    assert client.post("/page/login", data={"token": token}).status_code in (302, 303)
    page = client.get("/page/health").get_data(True)
    assert 'id="hosts"' in page and ">nas</th>" in page and f">{settings.host_name}</th>" in page


def test_the_health_page_of_a_single_host_has_no_hosts_section(client, token):
    assert client.post("/page/login", data={"token": token}).status_code in (302, 303)
    assert 'id="hosts"' not in client.get("/page/health").get_data(True)
