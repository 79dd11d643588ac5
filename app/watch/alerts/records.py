"""The stored events and deliveries as others read them (the notification log of the page and
of GET /open/notifications, the delays and counts of /metrics), and step 4, their pruning."""
from __future__ import annotations

from peewee import JOIN, SQL, Case, fn

from qlshadow.storage import db
from qlshadow.storage.models import AlertDelivery, AlertEvent, Cron
from qlshadow.watch import outage
from qlshadow.watch.alerts.queueing import HELD_BACK, TOO_OLD

KEEP_DAYS = 30  # events kept when QL_RETENTION_DAYS is 0 (off): they must not grow forever


def prune(settings, now: int) -> int:
    """Delete events older than the retention with their deliveries; returns events deleted."""
    cutoff = now - (settings.retention_days or KEEP_DAYS) * 86400
    with db.connected():
        oldest = AlertEvent.select(AlertEvent.at).order_by(AlertEvent.id).limit(1).scalar()
        if oldest is None or oldest >= cutoff:
            return 0
        with db.write_transaction():
            old = AlertEvent.select(AlertEvent.id).where(AlertEvent.at < cutoff)
            AlertDelivery.delete().where(AlertDelivery.event.in_(old)).execute()
            return AlertEvent.delete().where(AlertEvent.at < cutoff).execute()


def notify_log(limit: int = 50) -> list:
    """The newest deliveries first, then events no channel took yet; each a dict of
    at, cron_id, name, state, channel, outcome, attempts, last_error, updated_at,
    delay_seconds (from the event to the pass that sent it; None until sent).

    outcome: sent, pending (tried again later), given_up; for an event with no delivery:
    new (no tick has queued it: no channel configured, or the alert tuning holds it),
    too_old (not sent), held_back (the tuning held it and the problem ended: not sent) or
    outage (told by a service outage's message, outage.py).
    """
    rows = (AlertEvent
            .select(AlertEvent.id, AlertEvent.at, AlertEvent.cron, Cron.name, AlertEvent.state,
                    AlertEvent.status, AlertDelivery.channel, AlertDelivery.outcome,
                    AlertDelivery.attempts, AlertDelivery.last_error, AlertDelivery.updated_at)
            .join(Cron, on=(AlertEvent.cron == Cron.id))
            .switch(AlertEvent)
            .join(AlertDelivery, JOIN.LEFT_OUTER, on=(AlertDelivery.event == AlertEvent.id))
            .order_by(AlertEvent.id.desc(), AlertDelivery.channel)
            .limit(limit).tuples())
    out = []
    for (_event, at, cron_id, name, state, status, channel, outcome, attempts, error,
         updated) in rows:
        if channel is None:
            outcome = {TOO_OLD: "too_old", HELD_BACK: "held_back",
                       outage.FOLDED: "outage"}.get(status, "new")
        out.append({"at": at, "cron_id": cron_id, "name": name, "state": state,
                    "channel": channel, "outcome": outcome, "attempts": attempts or 0,
                    "last_error": error, "updated_at": updated,
                    "delay_seconds": updated - at if outcome == "sent" else None})
    return out


DELAY_BUCKETS = (1, 2, 5, 10, 30, 60, 120, 300, 600)  # seconds: /metrics' histogram


def delays(bounds: tuple = DELAY_BUCKETS) -> tuple:
    """([sent deliveries whose delay is at most each bound], count, sum of delays) over the
    stored deliveries, in one statement: the delay from an event to the sending pass."""
    delay = AlertDelivery.updated_at - AlertEvent.at
    row = (AlertDelivery
           .select(*(fn.SUM(Case(None, [(delay <= bound, 1)], 0)) for bound in bounds),
                   fn.COUNT(SQL("*")), fn.SUM(delay))
           .join(AlertEvent, on=(AlertDelivery.event == AlertEvent.id))
           .where(AlertDelivery.outcome == "sent").tuples().get())
    return [int(n or 0) for n in row[:-2]], int(row[-2] or 0), int(row[-1] or 0)


def counts_by_channel() -> dict:
    """{(channel, outcome): deliveries stored}, for /metrics."""
    query = (AlertDelivery.select(AlertDelivery.channel, AlertDelivery.outcome,
                                  fn.COUNT(SQL("*"))).group_by(AlertDelivery.channel,
                                                               AlertDelivery.outcome))
    return {(channel, outcome): n for channel, outcome, n in query.tuples()}
