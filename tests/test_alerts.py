"""Alerts (docs/ALERTS.md): events written by the callback's transaction only when a cron's
alert state changes, the `qlshadow notify` tick that finds missed and stuck crons and
sends each event once through every channel (real loopback receivers), retries with a
bound, two ticks at once, the crontab block's notify line, and the notification log."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from qlshadow.watch import alerts, notify
from qlshadow import config
from qlshadow.host import crontab
from qlshadow.storage import db
from qlshadow.storage.models import AlertDelivery, AlertEvent, Cron
from helpers import ROOT, table_rows
from receivers import PROXY_VARIABLES

STATUS = "/open/crons/status"


def ntfy(receiver) -> dict:
    return {"NTFY_URL": receiver.url, "NTFY_TOPIC": "ops"}


def channels_of(receiver) -> list:
    return notify.configured_channels(ntfy(receiver))


def titles(receiver) -> list:
    return [r["headers"]["title"] for r in receiver.requests]


def callback(client, auth, cron_id: int, status: int, **fields) -> None:
    response = client.put(STATUS, json={"ids": [cron_id], "status": status, **fields},
                          headers=auth)
    assert response.status_code == 200, response.get_json()


def run(client, auth, cron_id: int, exit_code: int, pid: int = 100, start: int | None = None,
        log_path: str = "backup/run.log") -> None:
    """One execution as task.sh reports it: the running callback, then the idle one."""
    started = start or int(time.time())
    callback(client, auth, cron_id, 0, pid=pid, log_path=log_path, last_execution_time=started)
    callback(client, auth, cron_id, 1, pid=pid, log_path=log_path, exit_code=exit_code,
             last_running_time=1)


def events() -> list:
    return [(e["state"], e["previous"]) for e in table_rows(AlertEvent)]


def tick(settings, channels, now=None) -> dict:
    with db.database.connection_context():
        return alerts.tick(settings, channels, now=now)


def deliveries() -> list:
    with db.database.connection_context():
        return list(AlertDelivery.select()
                    .order_by(AlertDelivery.event, AlertDelivery.channel).dicts())


# --- events, in the callback's transaction -----------------------------------------------

def test_ordinary_successful_callbacks_write_no_event_and_only_a_change_writes_one(
        client, auth, make_cron):
    cron = make_cron(schedule="@once")
    for pid in range(5):
        run(client, auth, cron["id"], 0, pid=pid)
    assert events() == []
    for pid in range(3):  # a failure, and more failures: one change
        run(client, auth, cron["id"], 2, pid=10 + pid)
    assert events() == [("failed", None)]
    for pid in range(3):  # ok again, and more successes: one change
        run(client, auth, cron["id"], 0, pid=20 + pid)
    assert events() == [("failed", None), ("ok", "failed")]
    with db.database.connection_context():
        assert Cron.get_by_id(cron["id"]).alert_state == "ok"


def test_a_finish_without_an_exit_code_leaves_the_alert_state_as_it_was(client, auth, make_cron):
    cron = make_cron(schedule="@once")
    run(client, auth, cron["id"], 1)
    callback(client, auth, cron["id"], 0, pid=7, log_path="backup/x.log")
    callback(client, auth, cron["id"], 1, pid=7, log_path="backup/x.log")  # no exit_code
    assert events() == [("failed", None)]


def test_a_start_writes_no_event(client, auth, make_cron):
    cron = make_cron(schedule="@once")
    run(client, auth, cron["id"], 3)
    callback(client, auth, cron["id"], 0, pid=8, log_path="backup/y.log")
    assert events() == [("failed", None)]


# --- the tick ------------------------------------------------------------------------------

def test_each_event_is_sent_once_across_repeated_ticks(
        settings, client, auth, make_cron, receiver):
    cron = make_cron(name="backup", schedule="@once")
    run(client, auth, cron["id"], 2)
    channels = channels_of(receiver)
    now = int(time.time())
    first = tick(settings, channels, now)
    for later in range(1, 4):
        assert tick(settings, channels, now + 600 * later)["sent"] == 0
    assert first["queued"] == 1 and first["sent"] == 1
    assert titles(receiver) == ["qlshadow: backup failed"]
    [delivery] = deliveries()
    assert (delivery["channel"], delivery["outcome"], delivery["attempts"]) == ("ntfy", "sent", 1)


def test_a_receiver_that_fails_twice_gets_the_message_on_the_third_tick(
        settings, client, auth, make_cron, receiver):
    cron = make_cron(schedule="@once")
    run(client, auth, cron["id"], 2)
    receiver.fail_times(2, status=503, body=b"busy")
    channels, now = channels_of(receiver), int(time.time())
    outcomes = []
    for n in range(5):
        done = tick(settings, channels, now + 300 * n)
        outcomes.append({k: v for k, v in done.items() if v and k != "found"})
        if n == 0:
            [pending] = deliveries()
            assert (pending["outcome"], pending["last_error"]) == ("pending", "HTTP 503: busy")
    assert outcomes == [{"queued": 1, "retrying": 1}, {"retrying": 1}, {"sent": 1}, {}, {}]
    assert len(receiver.requests) == 3
    [delivery] = deliveries()
    assert (delivery["outcome"], delivery["attempts"], delivery["last_error"]) == ("sent", 3, None)


def test_a_failed_send_waits_before_it_is_tried_again(settings, client, auth, make_cron, receiver):
    cron = make_cron(schedule="@once")
    run(client, auth, cron["id"], 2)
    receiver.fail_times(1)
    channels, now = channels_of(receiver), int(time.time())
    tick(settings, channels, now)
    tick(settings, channels, now + 1)  # a second tick in the same minute: too early
    assert len(receiver.requests) == 1
    tick(settings, channels, now + alerts.RETRY_AFTER[0])
    assert len(receiver.requests) == 2


def test_a_receiver_that_always_fails_is_given_up_after_the_bound(
        settings, client, auth, make_cron, receiver):
    cron = make_cron(schedule="@once")
    run(client, auth, cron["id"], 2)
    receiver.default = (500, b"down")
    channels, now = channels_of(receiver), int(time.time())
    for n in range(alerts.MAX_ATTEMPTS + 3):
        tick(settings, channels, now + 600 * n)
    assert len(receiver.requests) == alerts.MAX_ATTEMPTS
    [delivery] = deliveries()
    assert (delivery["outcome"], delivery["attempts"], delivery["last_error"]) == (
        "given_up", alerts.MAX_ATTEMPTS, "HTTP 500: down")


def test_no_channel_means_the_tick_records_nothing(settings, client, auth, make_cron):
    cron = make_cron(schedule="@once")
    run(client, auth, cron["id"], 2)
    assert tick(settings, []) == dict.fromkeys(("found", "queued", "sent", "retrying",
                                                "given_up"), 0)
    assert deliveries() == []
    assert [e["status"] for e in table_rows(AlertEvent)] == [0]


def test_an_event_older_than_a_day_when_a_channel_appears_is_not_sent(
        settings, client, auth, make_cron, receiver):
    cron = make_cron(schedule="@once")
    run(client, auth, cron["id"], 2)
    tick(settings, channels_of(receiver), int(time.time()) + alerts.MAX_EVENT_AGE + 60)
    assert receiver.requests == [] and deliveries() == []
    assert [e["status"] for e in table_rows(AlertEvent)] == [2]


def test_a_channel_no_longer_configured_gives_its_pending_delivery_up(
        settings, client, auth, make_cron, receiver):
    cron = make_cron(schedule="@once")
    run(client, auth, cron["id"], 2)
    receiver.fail_times(1)
    now = int(time.time())
    tick(settings, channels_of(receiver), now)
    other = notify.configured_channels({"GOTIFY_URL": receiver.url, "GOTIFY_TOKEN": "t"})
    tick(settings, other, now + 600)
    [delivery] = deliveries()
    assert (delivery["outcome"], delivery["last_error"]) == ("given_up", alerts.NOT_CONFIGURED)


def local_minute_fields(t: int) -> tuple:
    local = time.localtime(t)
    return local.tm_min, local.tm_hour


def test_a_cron_that_misses_fails_gets_stuck_and_recovers_is_told_in_order(
        settings, client, auth, make_cron, receiver):
    now = int(time.time())
    fired = (now - 4 * 3600) // 60 * 60  # a daily firing four hours ago
    minute, hour = local_minute_fields(fired)
    cron = make_cron(name="backup", schedule=f"{minute} {hour} * * *")
    with db.database.connection_context():  # made two days ago: its last two firings are due
        Cron.update(created_at=fired - 2 * 86400 - 60, updated_at=fired - 2 * 86400 - 60).where(
            Cron.id == cron["id"]).execute()
    log_dir = os.path.join(settings.log_dir, "backup")
    os.makedirs(log_dir)
    with open(os.path.join(log_dir, "stuck.log"), "w") as fh:
        fh.write("".join(f"line {i}\n" for i in range(30)) + "waiting for the lock\n")
    channels = channels_of(receiver)

    tick(settings, channels, now)  # no record of either firing: missed
    run(client, auth, cron["id"], 3, pid=1, start=fired + 5)  # the firing ran, and failed
    tick(settings, channels, now + 1)
    callback(client, auth, cron["id"], 0, pid=2, log_path="backup/stuck.log",
             last_execution_time=fired + 600)  # started and never finished: stuck
    tick(settings, channels, now + 2)
    callback(client, auth, cron["id"], 1, pid=2, log_path="backup/stuck.log", exit_code=0)
    tick(settings, channels, now + 3)
    tick(settings, channels, now + 4)

    assert titles(receiver) == ["qlshadow: backup missed a firing", "qlshadow: backup failed",
                                "qlshadow: backup is stuck", "qlshadow: backup is ok again"]
    assert events() == [("missed", None), ("failed", "missed"), ("stuck", "failed"),
                        ("ok", "stuck")]
    bodies = [r["body"].decode() for r in receiver.requests]
    # It names the firing (the first with no record), not when the tick noticed it.
    from qlshadow.timefmt import local_text
    assert f'Cron {cron["id"]} "backup" missed a firing, on ' in bodies[0]
    assert f"The firing at {local_text(fired - 86400, with_seconds=False)} has no record" in bodies[0]
    assert local_text(now, with_seconds=False) not in bodies[0]
    assert "Exit code: 3." in bodies[1]
    assert "has been running since" in bodies[2]
    assert "Last lines of its log (backup/stuck.log):" in bodies[2]
    assert bodies[2].endswith("line 29\nwaiting for the lock")
    assert "line 20\n" not in bodies[2]  # the last 10 lines only
    assert "Exit code: 0." in bodies[3] and "It was stuck before." in bodies[3]


# --- two ticks at once, and the command crond runs ---------------------------------------

def tick_process(conf: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("QL_", "QL3_")) and k not in PROXY_VARIABLES
           and k not in config.NOTIFY_KEYS}
    return subprocess.Popen([sys.executable, "-m", "qlshadow.cli", "--config", conf, "notify",
                             "--verbose"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_ticks_at_once_in_separate_processes_send_each_event_once(
        settings, client, auth, make_cron, receiver):
    ids = [make_cron(name=f"job{i}", schedule="@once")["id"] for i in range(6)]
    for cron_id in ids:
        run(client, auth, cron_id, 1, pid=cron_id)
    crontab.write_notify_conf(settings, environ=ntfy(receiver))
    conf = os.path.join(settings.data_dir, crontab.NOTIFY_CONF)

    started = [tick_process(conf) for _ in range(3)]
    results = [p.communicate(timeout=60) + (p.returncode,) for p in started]

    assert [(code, err) for _, err, code in results] == [(0, "")] * 3
    assert sorted(titles(receiver)) == sorted(f"qlshadow: job{i} failed" for i in range(6))
    assert [d["outcome"] for d in deliveries()] == ["sent"] * 6
    sent = sum(int(out.split("sent=")[1].split()[0]) for out, _, _ in results)
    assert sent == 6


def test_notify_conf_carries_the_channels_the_server_sees_and_is_private(settings, receiver):
    env = dict(ntfy(receiver), WEBHOOK_BODY="title: $title\ncontent: $content",
               WEBHOOK_URL="http://127.0.0.1:9/x", WEBHOOK_METHOD="POST")
    crontab.write_notify_conf(settings, environ=env)
    path = os.path.join(settings.data_dir, crontab.NOTIFY_CONF)
    assert os.stat(path).st_mode & 0o077 == 0
    loaded = notify.load_settings({}, path)
    assert loaded["WEBHOOK_BODY"] == "title: $title\ncontent: $content"
    assert loaded["NTFY_URL"] == receiver.url
    assert config.load(environ={}, config_file=path).db_url.startswith(
        settings.db_url.split(":")[0])


# --- the crontab block's notify line -------------------------------------------------------

@pytest.fixture
def installed(tmp_path, make_settings):
    """A system-mode app whose crontab 'installs' into a plain file."""
    from qlshadow.web.views import create_app
    target = tmp_path / "crontab.installed"
    settings = make_settings(QL_SCHEDULER="system", QL_CRONTAB_INSTALL=f"cp {{file}} {target}",
                             QL_CRONTAB_LIST=f"cat {target}")
    target.write_text("0 4 * * * /sbin/reboot\n")
    application = create_app(settings)
    yield application, settings, target
    db.discard_connection()


def test_the_block_carries_the_tick_line_and_loses_it_with_the_block(installed):
    from qlshadow.core.auth import system_token
    application, settings, target = installed
    crontab.write_notify_conf(settings, environ={"NTFY_TOPIC": "ops"})
    client = application.test_client()
    with db.database.connection_context(), db.write_transaction():
        token = system_token(settings.token_file)["value"]
    auth = {"Authorization": f"Bearer {token}"}
    response = client.post("/open/crons", json={"name": "a", "command": "true",
                                                "schedule": "*/5 * * * *"}, headers=auth)
    cron_id = response.get_json()["data"]["id"]
    data = os.path.realpath(settings.data_dir)
    lines = target.read_text().splitlines()
    tick_lines = [line for line in lines if line.endswith("/tick.sh")]
    assert tick_lines == [f"* * * * * QL_DATA_DIR={data} {crontab.shell_dir()}/tick.sh"]
    assert lines.index(tick_lines[0]) == len(lines) - 2  # last in the block, before END

    assert client.delete("/open/crons", json=[cron_id], headers=auth).status_code == 200
    assert target.read_text() == "0 4 * * * /sbin/reboot\n"


def test_with_no_channel_the_block_runs_nothing_every_minute(installed):
    application, settings, target = installed
    crontab.write_notify_conf(settings, environ={"QL_NOTIFY_TIMEOUT": "3"})
    assert crontab.notify_line(settings) == crontab.NO_CHANNEL
    with db.database.connection_context():
        text, active = crontab.render_rows(settings, [])
    assert [line for line in text.splitlines() if not line.startswith("#")] == []


def test_in_node_mode_the_tick_line_is_a_comment(make_settings, app):
    settings = make_settings(QL_SCHEDULER="node")
    crontab.write_notify_conf(settings, environ={"NTFY_TOPIC": "ops"})
    assert crontab.notify_line(settings).startswith("# * * * * * ")


# --- the notification log --------------------------------------------------------------------

def test_the_notification_log_lists_newest_first_with_outcome_and_attempts(
        settings, client, auth, make_cron, receiver):
    cron = make_cron(name="backup", schedule="@once")
    run(client, auth, cron["id"], 2, pid=1)
    receiver.fail_times(1, status=500, body=b"nope")
    now = int(time.time())
    tick(settings, channels_of(receiver), now)
    run(client, auth, cron["id"], 0, pid=2)  # ok again: not yet ticked

    response = client.get("/open/notifications?limit=10", headers=auth)
    assert response.status_code == 200
    data = response.get_json()["data"]
    assert [(r["cron_id"], r["name"], r["state"], r["channel"], r["outcome"], r["attempts"],
             r["last_error"]) for r in data] == [
        (cron["id"], "backup", "ok", None, "new", 0, None),
        (cron["id"], "backup", "failed", "ntfy", "pending", 1, "HTTP 500: nope")]
    assert all(isinstance(r["at"], int) for r in data)
    assert len(client.get("/open/notifications?limit=1", headers=auth).get_json()["data"]) == 1


@pytest.mark.parametrize("query", ["limit=0", "limit=x", "limit=501"])
def test_a_bad_limit_is_a_400_naming_it(client, auth, query):
    response = client.get(f"/open/notifications?{query}", headers=auth)
    assert response.status_code == 400 and "limit" in response.get_json()["message"]


def test_metrics_count_notifications_by_channel_and_outcome(
        settings, client, auth, make_cron, receiver, monkeypatch):
    from qlshadow.core.auth import issue_metrics_token
    for key, value in dict(ntfy(receiver), GOTIFY_URL=receiver.url, GOTIFY_TOKEN="t").items():
        monkeypatch.setenv(key, value)  # the server's environment: two channels
    cron = make_cron(schedule="@once")
    run(client, auth, cron["id"], 2, pid=1)
    run(client, auth, cron["id"], 0, pid=2)
    receiver.fail_times(1)
    tick(settings, channels_of(receiver), int(time.time()))
    with db.database.connection_context(), db.write_transaction():
        scrape = issue_metrics_token()
    text = client.get("/metrics", headers={"Authorization": f"Bearer {scrape}"}).data.decode()
    assert 'qlshadow_notifications_total{channel="ntfy",outcome="sent"} 1' in text
    assert 'qlshadow_notifications_total{channel="ntfy",outcome="pending"} 1' in text
    assert 'qlshadow_notifications_total{channel="ntfy",outcome="given_up"} 0' in text
    # A configured channel that never sent has its series from 0.
    assert 'qlshadow_notifications_total{channel="gotify",outcome="given_up"} 0' in text


def test_an_idle_tick_writes_nothing_and_reuses_the_firings_it_kept(
        settings, make_cron, receiver):
    make_cron(name="daily", schedule="0 3 * * *")
    make_cron(name="often", schedule="*/7 * * * *")
    channels, now = channels_of(receiver), int(time.time())
    tick(settings, channels, now)
    kept = os.path.join(settings.data_dir, alerts.FIRINGS_FILE)
    before = os.stat(kept)
    database = db.database.obj.database

    def sizes():
        return [os.path.getsize(p) if os.path.exists(p) else 0
                for p in (database, database + "-wal")] if db.is_sqlite() else []

    written = sizes()
    from qlshadow.watch.health import cache
    cache._NEAR.clear()  # as in a new process: only the file can give them back
    assert tick(settings, channels, now + 60) == dict.fromkeys(
        ("found", "queued", "sent", "retrying", "given_up"), 0)
    assert os.stat(kept).st_ino == before.st_ino and os.stat(kept).st_mtime == before.st_mtime
    assert sizes() == written
    assert receiver.requests == []


def test_an_event_rolls_back_with_the_callback_that_wrote_it(client, auth, make_cron):
    from qlshadow.core.legacy import apply_status_callback, parse_status_callback
    cron = make_cron(schedule="@once")
    cb = parse_status_callback({"ids": [cron["id"]], "status": 1, "pid": 5, "exit_code": 9})
    with db.database.connection_context():
        with pytest.raises(RuntimeError), db.write_transaction():
            apply_status_callback(cb, int(time.time()))
            assert AlertEvent.select().count() == 1  # written inside the transaction
            raise RuntimeError("the rest of the callback failed")
        assert AlertEvent.select().count() == 0
        assert Cron.get_by_id(cron["id"]).alert_state is None


def test_events_older_than_the_retention_go_with_their_deliveries(
        settings, client, auth, make_cron, receiver):
    cron = make_cron(schedule="@once")
    run(client, auth, cron["id"], 2, pid=1)
    now = int(time.time())
    tick(settings, channels_of(receiver), now)
    run(client, auth, cron["id"], 0, pid=2)
    later = now + settings.retention_days * 86400 + 60
    with db.database.connection_context():
        AlertEvent.update(at=later - 10).where(AlertEvent.state == "ok").execute()
        alerts.prune(settings, later)
    assert events() == [("ok", "failed")]
    assert deliveries() == []


def test_deleting_a_cron_deletes_its_events_and_deliveries(
        settings, client, auth, make_cron, receiver):
    cron = make_cron(schedule="@once")
    run(client, auth, cron["id"], 2, pid=1)
    tick(settings, channels_of(receiver), int(time.time()))
    assert client.delete("/open/crons", json=[cron["id"]], headers=auth).status_code == 200
    assert events() == [] and deliveries() == []


def test_the_callbacks_retention_step_deletes_old_events_without_any_channel(
        settings, client, auth, make_cron):
    from qlshadow.storage import retention
    cron = make_cron(schedule="@once")
    run(client, auth, cron["id"], 2, pid=1)
    run(client, auth, cron["id"], 0, pid=2)
    with db.database.connection_context():
        first = AlertEvent.select(AlertEvent.id).order_by(AlertEvent.id).scalar()
        AlertEvent.update(at=1).where(AlertEvent.id == first).execute()
    for pid in range(retention.PRUNE_EVERY):  # one retention step on the write path
        callback(client, auth, cron["id"], 2, pid=100 + pid)
    assert events() == [("ok", "failed")]
