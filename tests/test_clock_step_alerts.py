"""Firings crond skipped across a step of the wall clock alert nobody: the alert tick that
tells a missed firing through every channel (a real loopback receiver) records no event and
sends nothing for them, on both databases. The same history without the step is the
control: there the tick tells the miss."""
from __future__ import annotations

import time

import pytest

from qlshadow.core.runtime import ClockWatch
from qlshadow.storage import db
from qlshadow.storage.models import AlertEvent
from qlshadow.watch import alerts, notify
from helpers import table_rows
from reconcile_history import HOUR, history, new_cron

pytestmark = [pytest.mark.shadow_on, pytest.mark.usefixtures("utc_box")]


def _step_seen(at: int, step: int) -> None:
    """The service's clock watch saw the wall clock step by `step` s in the minute after
    `at`, while the boot clock went on by that minute only (NTP's step after a boot)."""
    readings = [(float(at), 500.0), (float(at + 60 + step), 560.0)]
    watch = ClockWatch(lambda: readings.pop(0) if len(readings) > 1 else readings[0])
    with db.connected():
        assert watch.check() is not None


@pytest.mark.parametrize("stepped", [True, False], ids=["clock_step", "no_step"])
def test_firings_skipped_across_a_clock_step_alert_nobody(settings, client, auth, receiver,
                                                          stepped):
    now = int(time.time()) // 600 * 600 + 300
    cron_id = new_cron(client, auth, "*/10 * * * *", now - 6 * HOUR, name="backup")
    start = now - 6 * HOUR + 600
    # The router ran it until two hours ago, then booted with its clock two hours behind;
    # NTP stepped it forward just now, and crond ran nothing in between.
    history(client, auth, cron_id, range(start - start % 600, now - 2 * HOUR, 600))
    if stepped:
        _step_seen(now - 2 * HOUR - 30, 2 * HOUR - 60)
    channels = notify.configured_channels({"NTFY_URL": receiver.url, "NTFY_TOPIC": "ops"})

    with db.database.connection_context():
        done = alerts.tick(settings, channels, now=now)

    told = [r["headers"]["title"] for r in receiver.requests]
    if stepped:
        assert (done["found"], done["sent"], told) == (0, 0, [])
        assert table_rows(AlertEvent) == []
    else:
        assert told == ["qlshadow: backup missed a firing"]
        assert [e["state"] for e in table_rows(AlertEvent)] == ["missed"]
