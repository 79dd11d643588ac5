"""The tick that costs the router almost nothing (docs/ALERTS.md): the crontab's tick line
(shell/tick.sh) asks the running service over the callbacks' transport and starts no
Python while it answers; `POST /open/notify/tick` needs the token, answers at once and
runs one tick at a time; a service outage is one message and one recovery, once."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from qlshadow import config
from qlshadow.core.auth import runner_token
from qlshadow.host import crontab
from qlshadow.storage import db
from qlshadow.storage.models import AlertEvent, Cron, ServiceOutage
from qlshadow.watch import alerts, notify, outage
from helpers import ROOT, http, table_rows
from shellenv import (SHELLS, ToolDir, busybox_static, shell_argv,
                      start_module_server, wait_for, which)
from test_alerts import local_minute_fields, run, titles
from receivers import PROXY_VARIABLES, Receiver

TICK = os.path.join(ROOT, "shell", "tick.sh")
DOWN = "qlshadow: the service is not answering"
UP = "qlshadow: the service is answering again"


def ntfy(receiver) -> dict:
    return {"NTFY_URL": receiver.url, "NTFY_TOPIC": "ops"}


# --- the endpoint ----------------------------------------------------------------------------

def runner_auth(settings) -> dict:
    with db.database.connection_context(), db.write_transaction():
        value = runner_token(os.path.realpath(settings.data_dir))["value"]
    return {"Authorization": f"Bearer {value}"}


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nope"}])
def test_the_tick_endpoint_needs_a_token(client, headers):
    response = client.post("/open/notify/tick", headers=headers)
    assert response.status_code == 401
    assert "token" in response.get_json()["message"]


def test_the_tick_endpoint_answers_at_once_and_runs_one_tick_at_a_time(
        app, settings, client, auth, make_cron, receiver):
    crontab.write_notify_conf(settings, environ=ntfy(receiver))
    cron = make_cron(name="backup", schedule="@once")
    run(client, auth, cron["id"], 3)
    headers = runner_auth(settings)
    receiver.hold = True  # the channel takes the message and never answers until released

    first = client.post("/open/notify/tick", headers=headers)
    assert (first.status_code, first.get_json()) == (202, {"code": 202, "data": {"started": True}})
    assert wait_for(lambda: receiver.requests, timeout=30)  # the tick is sending, held
    second = client.put("/open/notify/tick", headers=headers)
    assert (second.status_code, second.get_json()["data"]) == (202, {"started": False})

    receiver.released.set()
    ticker = app.extensions["qlshadow.tick"]
    ticker.thread.join(30)
    assert not ticker.thread.is_alive()
    third = client.post("/open/notify/tick", headers=headers)
    assert third.get_json()["data"] == {"started": True}
    ticker.thread.join(30)
    assert titles(receiver) == ["qlshadow: backup failed"]  # sent once, by the first tick


# --- a service outage is one event -------------------------------------------------------------

def missed_crons(make_cron, names) -> list:
    """Crons whose daily firing four hours ago has no record: missed at the next tick."""
    fired = (int(time.time()) - 4 * 3600) // 60 * 60
    minute, hour = local_minute_fields(fired)
    crons = [make_cron(name=name, schedule=f"{minute} {hour} * * *") for name in names]
    with db.database.connection_context():
        Cron.update(created_at=fired - 2 * 86400, updated_at=fired - 2 * 86400).execute()
    return crons, fired


def tick(settings, channels, now, answered, why=""):
    with db.database.connection_context():
        return alerts.tick(settings, channels, now=now, answered=answered, why=why)


def test_an_outage_is_one_message_and_one_recovery_naming_the_crons_it_affected(
        settings, client, auth, make_cron, receiver):
    crons, fired = missed_crons(make_cron, ["backup", "sync"])
    channels = notify.configured_channels(ntfy(receiver))
    now = int(time.time())

    tick(settings, channels, now, False, "curl: (7) Failed to connect")  # the fallback tick
    tick(settings, channels, now + 60, False, "curl: (7) Failed to connect")
    assert titles(receiver) == [DOWN]
    down = receiver.requests[0]["body"].decode()
    assert f"not answering at {settings.base_url} since " in down
    assert "curl: (7) Failed to connect." in down

    tick(settings, channels, now + 120, True)  # the service ticks again
    tick(settings, channels, now + 180, True)
    assert titles(receiver) == [DOWN, UP]
    up = receiver.requests[1]["body"].decode()
    assert f'- {crons[0]["id"]} "backup": missed a firing' in up
    assert f'- {crons[1]["id"]} "sync": missed a firing' in up

    # The firings come late: backup ran fine (its miss was told above), sync failed (a new
    # problem, told on its own).
    run(client, auth, crons[0]["id"], 0, pid=1, start=fired + 5)
    run(client, auth, crons[1]["id"], 2, pid=2, start=fired + 5)
    tick(settings, channels, now + 240, True)
    assert titles(receiver) == [DOWN, UP, "qlshadow: sync failed"]
    states = [(e["state"], e["status"]) for e in table_rows(AlertEvent, AlertEvent.id)]
    assert sorted(states) == sorted([("missed", outage.FOLDED), ("missed", outage.FOLDED),
                                     ("ok", outage.FOLDED), ("failed", 1)])
    with db.database.connection_context():
        assert {r["outcome"] for r in alerts.notify_log() if r["state"] != "failed"} == {"outage"}
        assert ServiceOutage.select().where(ServiceOutage.is_open == 1).count() == 0


def test_a_recovery_heard_before_its_folded_miss_was_queued_is_folded_with_it(
        settings, client, auth, make_cron, receiver):
    """The miss is found by the tick that closes the outage, and the cron's callback records
    its recovery before a sender queues either: both are the outage's, neither goes alone."""
    (cron,), fired = missed_crons(make_cron, ["backup"])
    channels = notify.configured_channels(ntfy(receiver))
    now = int(time.time())
    with db.database.connection_context():
        outage.note(settings.base_url, False, "HTTP 503", now)
        outage.note(settings.base_url, True, "", now + 60)
        assert alerts.find_changes(settings, now + 60) == 1
    run(client, auth, cron["id"], 0, pid=1, start=fired + 5)  # recorded: ok, after missed
    assert [(e["state"], e["status"]) for e in table_rows(AlertEvent, AlertEvent.id)] == [
        ("missed", 0), ("ok", 0)]
    tick(settings, channels, now + 60, True)
    assert titles(receiver) == [DOWN, UP]
    assert f'- {cron["id"]} "backup": missed a firing' in receiver.requests[1]["body"].decode()
    assert [(e["state"], e["status"]) for e in table_rows(AlertEvent, AlertEvent.id)] == [
        ("missed", outage.FOLDED), ("ok", outage.FOLDED)]


def test_a_recovery_recorded_while_the_pass_folds_its_miss_waits_and_is_folded_next(
        settings, client, auth, make_cron, receiver, monkeypatch):
    """The tick that closes the outage finds the miss and folds it; the cron's callback
    records its recovery just after that fold, in the same pass (as under real crond,
    which starts the cron and the tick line in one minute). The pass queues only what its
    fold judged: the recovery waits, and the next pass folds it with its miss."""
    channels = notify.configured_channels(ntfy(receiver))
    now = int(time.time())
    tick(settings, channels, now, False, "HTTP 503")
    (cron,), fired = missed_crons(make_cron, ["backup"])  # missed, found by the next tick
    fold, recorded = outage.fold, []

    def fold_then_a_callback(*args):
        folded = fold(*args)
        if not recorded:  # the callback lands right after this pass's fold
            recorded.append(run(client, auth, cron["id"], 0, pid=1, start=fired + 5))
        return folded

    monkeypatch.setattr(outage, "fold", fold_then_a_callback)
    tick(settings, channels, now + 60, True)
    assert titles(receiver) == [DOWN, UP]
    assert [(e["state"], e["status"]) for e in table_rows(AlertEvent, AlertEvent.id)] == [
        ("missed", outage.FOLDED), ("ok", 0)]
    tick(settings, channels, now + 120, True)
    assert titles(receiver) == [DOWN, UP]
    assert [(e["state"], e["status"]) for e in table_rows(AlertEvent, AlertEvent.id)] == [
        ("missed", outage.FOLDED), ("ok", outage.FOLDED)]


def test_a_second_outage_opens_after_the_first_has_ended(settings, receiver):
    channels = notify.configured_channels(ntfy(receiver))
    now = int(time.time())
    for offset, answered in ((0, False), (60, True), (120, True), (180, False), (240, True)):
        tick(settings, channels, now + offset, answered, "HTTP 503")
    assert titles(receiver) == [DOWN, UP, DOWN, UP]
    assert "No cron missed a firing meanwhile." in receiver.requests[1]["body"].decode()


def test_a_message_a_channel_refused_is_sent_again_by_a_later_tick_once(settings, receiver):
    receiver.fail_times(1)
    channels = notify.configured_channels(ntfy(receiver))
    now = int(time.time())
    tick(settings, channels, now, False, "no answer")
    tick(settings, channels, now + 60, False, "no answer")
    tick(settings, channels, now + 120, False, "no answer")
    assert titles(receiver) == [DOWN, DOWN]  # refused, then taken; never again


def fallback_tick(conf: str, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("QL_", "QL3_")) and k not in PROXY_VARIABLES
           and k not in config.NOTIFY_KEYS}
    env["QL_CRONTAB_INSTALL"] = ""  # whatever it does, never into this user's own crontab
    return subprocess.Popen([sys.executable, "-m", "qlshadow.cli", "--config", conf, "notify",
                             *args], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_three_fallback_ticks_at_once_open_one_outage_and_tell_it_once(
        settings, make_cron, receiver):
    missed_crons(make_cron, ["backup"])
    crontab.write_notify_conf(settings, environ=ntfy(receiver))
    conf = os.path.join(settings.data_dir, crontab.NOTIFY_CONF)
    started = [fallback_tick(conf, "--unanswered", "connection refused") for _ in range(3)]
    results = [p.communicate(timeout=60) + (p.returncode,) for p in started]
    assert [(code, err) for _, err, code in results] == [(0, "")] * 3
    assert titles(receiver) == [DOWN]
    assert [(e["state"], e["status"]) for e in table_rows(AlertEvent)] == [("missed", outage.FOLDED)]
    with db.database.connection_context():
        assert ServiceOutage.select().count() == 1

    answered = fallback_tick(conf, "--answered")
    assert answered.communicate(timeout=60)[1] == ""
    assert titles(receiver) == [DOWN, UP]


# --- the crontab's tick line, run for real under each shell ---------------------------------

@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(request, tmp_path_factory):
    """A live server whose notify.conf has a loopback channel, one cron, and a failure to tell."""
    receiver = Receiver()
    server, cleanup = start_module_server(tmp_path_factory, request.param,
                                          NTFY_URL=receiver.url, NTFY_TOPIC="ops")
    from shellenv import create_cron
    cron = create_cron(server, schedule="@once")
    status, _ = http("PUT", f"{server.url}/open/crons/status",
                     {"ids": [cron["id"]], "status": 1, "exit_code": 4}, server.headers)
    assert status == 200
    yield server, receiver
    cleanup()
    receiver.close()


def tools_with_recorders(path: str, transport: str) -> tuple:
    """A PATH folder with the transport and `python3` and `qlshadow` that record their calls."""
    tools = ToolDir(path, tools=("date",))
    if transport == "curl":
        tools.link("curl")
    else:
        tools.link(transport, busybox_static())
        tools.link("mkfifo")
        tools.link("rm")
        tools.link("timeout")
    calls = os.path.join(path, "calls")
    for name in ("python3", "qlshadow"):
        tools.script(name, f'printf "%s\\n" "{name} $*" >> "{calls}"')
    return tools, calls


def run_tick(shell: str, tools: ToolDir, data_dir: str, **env) -> subprocess.CompletedProcess:
    full = {"PATH": tools.path, "SHELL": "/bin/sh", "QL_DATA_DIR": data_dir,
            "QL_CLI": os.path.join(tools.path, "qlshadow"), **env}
    return subprocess.run([which("env"), "-i", *(f"{k}={v}" for k, v in full.items()),
                           *shell_argv(shell), TICK], capture_output=True, text=True, timeout=60)


def calls_of(path: str) -> list:
    try:
        with open(path) as fh:
            return fh.read().splitlines()
    except FileNotFoundError:
        return []


@pytest.mark.parametrize("transport", ["curl", "nc", "wget"])
@pytest.mark.parametrize("shell", list(SHELLS))
def test_the_tick_line_starts_no_python_while_the_service_answers(
        served, shell, transport, tmp_path):
    server, receiver = served
    tools, calls = tools_with_recorders(str(tmp_path / "bin"), transport)
    result = run_tick(shell, tools, server.data_dir, QL_BASE_URL=server.url)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert calls_of(calls) == []
    # The service ticked: the failure was told, once whichever run got there first.
    assert wait_for(lambda: receiver.requests, timeout=30)
    assert [r["headers"]["title"] for r in receiver.requests] == [
        receiver.requests[0]["headers"]["title"]]


@pytest.mark.parametrize("shell", list(SHELLS))
def test_the_tick_line_starts_the_python_tick_only_when_the_service_does_not_answer(
        served, shell, tmp_path):
    server, _ = served
    tools, calls = tools_with_recorders(str(tmp_path / "bin"), "curl")
    closed = "http://127.0.0.1:9"  # the discard port: nothing listens on loopback
    result = run_tick(shell, tools, server.data_dir, QL_BASE_URL=closed)
    assert result.returncode == 0, result.stderr
    conf = os.path.join(os.path.realpath(server.data_dir), "notify.conf")
    assert len(calls_of(calls)) == 1, calls_of(calls)
    (call,) = calls_of(calls)
    assert call.startswith(f"qlshadow --config {conf} notify --unanswered ")
    assert "127.0.0.1" in call

    # Answered, but refused (a token the service does not know): the Python tick, told so.
    os.remove(calls)
    result = run_tick(shell, tools, server.data_dir, QL_BASE_URL=server.url,
                      QL_CLI=os.path.join(tools.path, "qlshadow"))
    assert calls_of(calls) == []  # the real token works
    token_file = os.path.join(server.data_dir, "runner-token.json")
    with open(token_file) as fh:
        kept = fh.read()
    try:
        with open(token_file, "w") as fh:
            fh.write('{"value": "unknown", "expiration": 4102444800}\n')
        result = run_tick(shell, tools, server.data_dir, QL_BASE_URL=server.url)
        assert result.returncode == 0, result.stderr
        assert calls_of(calls) == [f"qlshadow --config {conf} notify --answered"]
    finally:
        with open(token_file, "w") as fh:
            fh.write(kept)


def test_with_no_channel_the_crontab_line_runs_no_program(make_settings, app):
    settings = make_settings(QL_SCHEDULER="system")
    crontab.write_notify_conf(settings, environ={})
    line = crontab.notify_line(settings)
    assert line == crontab.NO_CHANNEL and line.startswith("# ")  # crond runs nothing for it


def test_a_real_outage_is_told_once_and_its_end_once_through_the_tick_line(
        live_server, receiver, tmp_path):
    """tick.sh as crond runs it, against a real server that stops and starts again: the
    Python tick it starts while the server is gone tells the outage once, and the server's
    own tick, once asked again, tells its end once."""
    first = live_server(NTFY_URL=receiver.url, NTFY_TOPIC="ops")
    from shellenv import cli_for_tests, create_cron
    create_cron(first, schedule="@once")  # writes runner.env and the runner's token
    data = first.env["QL_DATA_DIR"]
    crond_env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SHELL": "/bin/sh",
                 "QL_CLI": cli_for_tests(), "HOME": str(tmp_path)}

    def line(url: str) -> None:
        env = dict(crond_env, QL_BASE_URL=url)
        done = subprocess.run([which("dash"), "-c", f"QL_DATA_DIR={data} {TICK}"], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr

    gone = first.url
    first.stop()
    line(gone)
    line(gone)
    assert titles(receiver) == [DOWN]
    assert f"not answering at {gone} since " in receiver.requests[0]["body"].decode()

    second = live_server(NTFY_URL=receiver.url, NTFY_TOPIC="ops")
    line(second.url)
    assert wait_for(lambda: len(receiver.requests) == 2, timeout=30)
    line(second.url)
    time.sleep(1)  # a second message would come now: none must
    assert titles(receiver) == [DOWN, UP]
