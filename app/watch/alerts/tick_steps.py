"""One alert tick: the fleet's hosts, then find, queue, send and prune in that order, with a
service outage opened, told and closed on the way (outage.py)."""
from __future__ import annotations

import time

from qlshadow.watch import outage
from qlshadow.watch.alerts.delivery import deliver
from qlshadow.watch.alerts.finding import find_changes
from qlshadow.watch.alerts.hosts import host_changes
from qlshadow.watch.alerts.queueing import queue_events
from qlshadow.watch.alerts.records import prune


def tick(settings, channels: list, now: int | None = None, send=None,
         answered: bool | None = None, why: str = "") -> dict:
    """One tick (see the package's docstring); returns what it did, by count.

    answered: whether the tick line reached the service (outage.py): False opens an
    outage (why says what the line saw), True closes it, None (a tick run by hand) leaves
    it as it is.
    """
    done = {"found": 0, "queued": 0, "sent": 0, "retrying": 0, "given_up": 0}
    if not channels:
        return done
    if send is None:
        from qlshadow.watch.notify.sending import send
    now = int(time.time()) if now is None else now
    outages = outage.note(settings.base_url, answered, why, now)
    host_changes(channels, now, send)
    done["found"] = find_changes(settings, now)
    done["queued"] = queue_events(channels, now)
    for outcome in deliver(settings, channels, now, send):
        done[outcome] += 1
    if outages:
        for outcome in outage.deliver(settings, channels, now, send):
            done[outcome] += 1
        outage.prune(settings, now)
    prune(settings, now)
    return done
