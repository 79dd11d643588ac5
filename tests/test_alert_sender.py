"""The in-service alert sender (watch/sender.py, issue 38): a failure or a recovery reaches
a loopback receiver within seconds of its finish callback, once, through the tick's claims;
a hanging receiver delays no callback; a service killed while sending leaves the message
to the next tick; and a missed firing is told within grace + 60 s of the firing."""
from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

from qlshadow.storage import db
from qlshadow.storage.models import AlertDelivery, AlertEvent
from qlshadow.watch import alerts, notify
from qlshadow.watch import sender as alert_sender
from helpers import http

STATUS = "/open/crons/status"
PROMISE = 5.0  # seconds from the finish callback to the receiver (issue 38)


def ntfy(receiver) -> dict:
    return {"NTFY_URL": receiver.url, "NTFY_TOPIC": "ops"}


def titles(receiver) -> list:
    return [r["headers"]["title"] for r in receiver.requests]


def wait_for(predicate, limit: float) -> bool:
    """Poll predicate until it holds or limit seconds passed; whether it held."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


# --- a real server --------------------------------------------------------------------------

def make_cron(server, name: str) -> int:
    status, body = http("POST", server.url + "/open/crons",
                        {"name": name, "command": "true", "schedule": "@once"}, server.headers)
    assert status == 200, body
    return body["data"]["id"]


def finish(server, cron_id: int, exit_code: int, pid: int = 100, timeout: float = 30) -> None:
    """The running callback, then the idle one with the exit code (task.sh's pair)."""
    for status, extra in ((0, {}), (1, {"exit_code": exit_code})):
        answer = http("PUT", server.url + STATUS,
                      {"ids": [cron_id], "status": status, "pid": pid,
                       "log_path": f"{cron_id}/{pid}.log", **extra},
                      server.headers, timeout=timeout)
        assert answer[0] == 200, answer


def tick_now(settings, receiver, now: int | None = None) -> dict:
    database, _ = db.open_database(settings, create=False)
    with database.connection_context():
        return alerts.tick(settings, notify.configured_channels(ntfy(receiver)),
                           now=int(time.time()) if now is None else now)


def stored_deliveries(settings) -> list:
    database, _ = db.open_database(settings, create=False)
    with database.connection_context():
        return list(AlertDelivery.select().order_by(AlertDelivery.event).dicts())


def test_a_failure_and_its_recovery_reach_the_receiver_within_seconds_once(
        live_server, make_settings, receiver):
    server = live_server(**ntfy(receiver))
    cron_id = make_cron(server, "backup")

    started = time.monotonic()
    finish(server, cron_id, 2)
    assert wait_for(lambda: len(receiver.requests) >= 1, PROMISE)
    assert time.monotonic() - started < PROMISE
    started = time.monotonic()
    finish(server, cron_id, 0, pid=101)
    assert wait_for(lambda: len(receiver.requests) >= 2, PROMISE)
    assert time.monotonic() - started < PROMISE

    settings = make_settings()
    # The tick a minute later finds both deliveries sent: nothing more goes out.
    done = tick_now(settings, receiver, int(time.time()) + 60)
    assert (done["queued"], done["sent"]) == (0, 0)
    assert titles(receiver) == ["qlshadow: backup failed", "qlshadow: backup is ok again"]
    assert [(d["outcome"], d["attempts"]) for d in stored_deliveries(settings)] == \
        [("sent", 1), ("sent", 1)]


def test_alert_after_is_sent_within_seconds_of_the_failure_that_reaches_it(
        live_server, make_settings, receiver):
    server = live_server(**ntfy(receiver))
    cron_id = make_cron(server, "flaky")
    status, body = http("PUT", server.url + "/open/crons",
                        {"id": cron_id, "alert_after": 3}, server.headers)
    assert status == 200, body
    finish(server, cron_id, 1, pid=300)
    finish(server, cron_id, 1, pid=301)
    # The second failure of three: the sender may run, yet sends nothing.
    assert not wait_for(lambda: receiver.requests, 1.0)
    started = time.monotonic()
    finish(server, cron_id, 1, pid=302)
    assert wait_for(lambda: len(receiver.requests) >= 1, PROMISE)
    assert time.monotonic() - started < PROMISE
    assert titles(receiver) == ["qlshadow: flaky failed"]
    done = tick_now(make_settings(), receiver, int(time.time()) + 60)
    assert done["sent"] == 0 and len(receiver.requests) == 1


@pytest.mark.parametrize("backend", ["postgres"])
def test_two_servers_on_one_postgresql_database_send_each_alert_once(
        live_server, make_settings, receiver):
    first = live_server(**ntfy(receiver))
    second = live_server(**ntfy(receiver))
    crons = [make_cron(first, f"job{i}") for i in range(6)]
    # Every cron fails on both servers at once: one of them records each event, and both
    # senders run at the same time over the same deliveries.
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        list(pool.map(lambda job: finish(*job),
                      [(server, cron_id, 1, 200 + n)
                       for n, cron_id in enumerate(crons) for server in (first, second)]))
    assert wait_for(lambda: len(receiver.requests) >= 6, PROMISE)
    time.sleep(1)  # a second sender or a late pass would send within this
    settings = make_settings()
    assert tick_now(settings, receiver, int(time.time()) + 60)["sent"] == 0
    assert sorted(titles(receiver)) == sorted(f"qlshadow: job{i} failed" for i in range(6))
    assert [d["attempts"] for d in stored_deliveries(settings)] == [1] * 6


def test_a_receiver_that_hangs_delays_no_callback(live_server, make_settings, receiver):
    receiver.hold = True  # takes the request and never answers (until released)
    server = live_server(QL_NOTIFY_TIMEOUT="30", **ntfy(receiver))
    crons = [make_cron(server, f"job{i}") for i in range(24)]
    finish(server, crons[0], 1)
    assert wait_for(lambda: len(receiver.requests) == 1, PROMISE)  # the sender now hangs

    started = time.monotonic()
    # Failures wake the hanging sender again and again (more than its queue holds), and
    # ordinary callbacks go on: all are answered while the 30 s hang lasts.
    for n, cron_id in enumerate(crons[1:] + crons[1:4]):
        finish(server, cron_id, 1 if n < len(crons) - 1 else 0, pid=300 + n, timeout=25)
    elapsed = time.monotonic() - started
    assert elapsed < 25
    assert len(receiver.requests) == 1  # still hanging: nothing else was sent meanwhile

    # Released (its connection closes unanswered), the sender goes on with the rest.
    receiver.hold = False
    receiver.released.set()
    # 24 failures and 3 recoveries.
    assert wait_for(lambda: len(receiver.requests) >= 27, 30)
    assert wait_for(lambda: "wake-up(s) dropped" in server.output(), 5)
    outcomes = sorted(d["outcome"] for d in stored_deliveries(make_settings()))
    assert outcomes == ["pending"] + ["sent"] * 26  # the hung one: retried by the tick


def test_a_service_killed_while_sending_leaves_the_message_to_the_next_tick_once(
        live_server, make_settings, receiver):
    receiver.hold = True
    server = live_server(QL_NOTIFY_TIMEOUT="30", **ntfy(receiver))
    cron_id = make_cron(server, "backup")
    finish(server, cron_id, 1)
    assert wait_for(lambda: len(receiver.requests) == 1, PROMISE)
    server.process.kill()  # mid-send: claimed, not recorded
    server.process.wait(10)
    receiver.hold = False

    settings = make_settings()
    [claimed] = stored_deliveries(settings)
    assert (claimed["outcome"], claimed["attempts"]) == ("pending", 1)
    now = int(time.time())
    assert claimed["claimed_until"] > now
    assert tick_now(settings, receiver, now)["sent"] == 0  # the claim still holds
    assert tick_now(settings, receiver, claimed["claimed_until"])["sent"] == 1  # it lapsed
    assert tick_now(settings, receiver, claimed["claimed_until"] + 600)["sent"] == 0
    assert titles(receiver) == ["qlshadow: backup failed"] * 2  # the hung one, then the tick's
    [sent] = stored_deliveries(settings)
    assert (sent["outcome"], sent["attempts"]) == ("sent", 2)


# --- the sender object, in this process -------------------------------------------------

def test_the_sender_has_no_thread_while_idle_and_ends_when_nothing_is_left(
        app, client, auth, make_cron, receiver):
    sender = alert_sender.install(app, channels=lambda: notify.configured_channels(ntfy(receiver)))
    assert not sender.running()
    cron = make_cron(name="backup", schedule="@once")
    # Closing the answer (as a server does once it wrote it) wakes the sender.
    for status, extra in ((0, {}), (1, {"exit_code": 4})):
        with client.put(STATUS, json={"ids": [cron["id"]], "status": status, "pid": 1,
                                      "log_path": "b/1.log", **extra}, headers=auth) as answer:
            assert answer.status_code == 200
    assert wait_for(lambda: len(receiver.requests) == 1, PROMISE)
    assert wait_for(lambda: not sender.running(), PROMISE)
    assert not [t for t in threading.enumerate() if t.name == "qlshadow-sender"]
    # An ordinary callback (no state change) wakes nothing.
    passes = sender.passes
    for status, extra in ((0, {}), (1, {"exit_code": 4})):
        client.put(STATUS, json={"ids": [cron["id"]], "status": status, "pid": 2,
                                 "log_path": "b/2.log", **extra}, headers=auth).close()
    assert sender.passes == passes and not sender.running()
    assert titles(receiver) == ["qlshadow: backup failed"]


def test_with_no_channel_one_pass_looks_and_later_events_start_no_thread(
        app, client, auth, make_cron, receiver):
    configured = []  # no channel yet
    sender = alert_sender.install(app, channels=lambda: list(configured))
    cron = make_cron(name="flapping", schedule="@once")

    def flap(pid: int) -> None:
        for status, extra in ((0, {}), (1, {"exit_code": pid % 2})):
            client.put(STATUS, json={"ids": [cron["id"]], "status": status, "pid": pid,
                                     "log_path": f"f/{pid}.log", **extra}, headers=auth).close()
    flap(1)  # failed: one pass finds no channel
    assert wait_for(lambda: sender.passes == 1 and not sender.running(), PROMISE)
    for pid in range(2, 8):  # ok, failed, ...: each an event, none worth a thread
        flap(pid)
    assert sender.passes == 1 and not sender.running()
    # The tick's wake-up is never ignored; once a channel is set, the next pass sends.
    configured.extend(notify.configured_channels(ntfy(receiver)))
    sender._quiet_until = 0.0  # as when NO_CHANNEL_RECHECK has passed
    flap(10)  # ok again: a change, so a wake-up
    assert wait_for(lambda: len(receiver.requests) >= 1, PROMISE)


def test_wake_ups_on_the_hold_thread_wait_for_the_batch_to_be_durable(
        app, client, auth, make_cron, receiver):
    sender = alert_sender.install(app, channels=lambda: notify.configured_channels(ntfy(receiver)))
    sender.hold_thread = threading.get_ident()  # this thread stands for the loop lane's
    cron = make_cron(name="backup", schedule="@once")
    for status, extra in ((0, {}), (1, {"exit_code": 4})):
        client.put(STATUS, json={"ids": [cron["id"]], "status": status, "pid": 1,
                                 "log_path": "b/1.log", **extra}, headers=auth).close()
    assert sender.passes == 0 and not sender.running()  # held until the fsync
    sender.release(durable=False)  # the fsync failed: that callback was never answered
    assert sender.passes == 0 and not sender.running()
    alert_sender.wake(app, "again")
    sender.release(durable=True)
    assert wait_for(lambda: len(receiver.requests) == 1, PROMISE)
    assert wait_for(lambda: not sender.running(), PROMISE)


def test_wake_is_a_no_op_for_an_app_without_a_sender(app):
    assert alert_sender.wake(app) is False


def test_the_queue_of_wake_ups_drops_the_oldest_and_counts_them(
        app, client, auth, make_cron, receiver):
    receiver.hold = True
    channels = notify.configured_channels(dict(ntfy(receiver), QL_NOTIFY_TIMEOUT="30"))
    sender = alert_sender.install(app, channels=lambda: channels)
    cron = make_cron(name="backup", schedule="@once")
    for status, extra in ((0, {}), (1, {"exit_code": 4})):
        client.put(STATUS, json={"ids": [cron["id"]], "status": status, "pid": 1,
                                 "log_path": "b/1.log", **extra}, headers=auth).close()
    assert wait_for(lambda: len(receiver.requests) == 1, PROMISE)  # the pass hangs in a send
    for _ in range(alert_sender.QUEUE_MAX + 5):
        sender.wake()
    assert sender.dropped == 5
    receiver.hold = False
    receiver.released.set()
    assert wait_for(lambda: not sender.running(), 40)
    assert sender.passes == 2  # every queued wake-up served by one more pass


# --- a missed firing, with the tick's clock ------------------------------------------------

@pytest.mark.parametrize("grace,silent,told", [(None, 0, 60), (90, 60, 120)])
def test_a_missed_firing_is_told_within_grace_and_a_minute(
        utc_box, settings, client, auth, make_cron, receiver, grace, silent, told):
    base = (int(time.time()) // 60 - 30) * 60  # a firing half an hour ago
    extra = {} if grace is None else {"grace": grace}
    cron = make_cron(name="minutely", schedule="* * * * *", **extra)
    with db.database.connection_context(), db.write_transaction():
        from qlshadow.storage.models import Cron
        Cron.update(created_at=base - 600, updated_at=base - 600).where(
            Cron.id == cron["id"]).execute()
    for status, more in ((0, {"last_execution_time": base + 1}), (1, {"exit_code": 0})):
        client.put(STATUS, json={"ids": [cron["id"]], "status": status, "pid": 9,
                                 "log_path": "m/9.log", **more}, headers=auth)
    with db.database.connection_context(), db.write_transaction():
        from qlshadow.storage.models import RunningInstance
        # It ran for 2 s then (its finish is dated now): BusyBox crond skips no firing of it.
        RunningInstance.update(finished_at=base + 3).where(
            RunningInstance.cron == cron["id"]).execute()
    missed = base + 60  # the next firing never reports
    channels = notify.configured_channels(ntfy(receiver))
    with db.database.connection_context():
        # The tick of the minute before says nothing ...
        assert alerts.tick(settings, channels, now=missed + silent)["sent"] == 0
        # ... and the one at `told` s sends it: within grace + 60 s of the firing.
        assert alerts.tick(settings, channels, now=missed + told)["sent"] == 1
    assert told <= (grace or 60) + 60
    assert titles(receiver) == ["qlshadow: minutely missed a firing"]


# --- the delay from the event to the send -------------------------------------------------

def test_the_notification_log_and_metrics_show_the_delay_from_the_event_to_the_send(
        settings, client, auth, make_cron, receiver):
    cron = make_cron(name="backup", schedule="@once")
    for status, extra in ((0, {}), (1, {"exit_code": 3})):
        client.put(STATUS, json={"ids": [cron["id"]], "status": status, "pid": 1,
                                 "log_path": "b/1.log", **extra}, headers=auth)
    with db.database.connection_context():
        at = AlertEvent.select(AlertEvent.at).scalar()
        alerts.tick(settings, notify.configured_channels(ntfy(receiver)), now=at + 42)
    [row] = client.get("/open/notifications", headers=auth).get_json()["data"]
    assert (row["outcome"], row["delay_seconds"]) == ("sent", 42)
    from qlshadow.core.auth import issue_metrics_token
    with db.database.connection_context(), db.write_transaction():
        scrape = issue_metrics_token()
    text = client.get("/metrics", headers={"Authorization": f"Bearer {scrape}"}).data.decode()
    assert 'qlshadow_notification_delay_seconds_bucket{le="30"} 0' in text
    assert 'qlshadow_notification_delay_seconds_bucket{le="60"} 1' in text
    assert 'qlshadow_notification_delay_seconds_bucket{le="+Inf"} 1' in text
    assert "qlshadow_notification_delay_seconds_sum 42" in text
    assert "qlshadow_notification_delay_seconds_count 1" in text
