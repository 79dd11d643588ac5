"""Step 3, send: each due delivery claimed (a compare-and-set that takes a lease), sent
outside any transaction, and its outcome recorded: sent, tried again later, or given up."""
from __future__ import annotations

from peewee import SQL

from qlshadow.storage import db
from qlshadow.storage.models import AlertDelivery
from qlshadow.watch.alerts.wording import message

MAX_ATTEMPTS = 5
RETRY_AFTER = (30, 60, 120, 240)  # seconds after the 1st, 2nd, 3rd, 4th failed attempt
SENDS_PER_TICK = 100  # the rest wait for the next tick, so a tick stays within its minute
CLAIM_MARGIN = 60  # a claim lasts the channel's timeout plus this
NOT_CONFIGURED = "the channel is no longer configured"

_PENDING = AlertDelivery.outcome == SQL("'pending'")  # literal: alert_deliveries_pending


def deliver(settings, channels: list, now: int, send):
    """Send the due deliveries one by one; yields each outcome (sent, retrying, given_up)."""
    by_name = {c.name: c for c in channels}
    with db.connected():
        due = list(AlertDelivery
                   .select(AlertDelivery.event_id, AlertDelivery.channel)
                   .where(_PENDING & (AlertDelivery.next_at <= now)
                          & (AlertDelivery.claimed_until <= now))
                   .order_by(AlertDelivery.event_id, AlertDelivery.channel)
                   .limit(SENDS_PER_TICK).tuples())
    for event_id, name in due:
        channel = by_name.get(name)
        lease = now + int(channel.timeout if channel else 0) + CLAIM_MARGIN
        attempts = _claim(event_id, name, now, lease)
        if attempts is None:
            continue  # another tick has it
        if channel is None:
            ok, reason = False, NOT_CONFIGURED
        else:
            text = message(settings, event_id)
            if text is None:
                continue  # its cron was deleted meanwhile, and the delivery with it
            result = send(channel, *text)
            ok, reason = result.ok, result.reason
        yield _record(event_id, name, attempts, ok, reason, now, give_up=channel is None)


def _key(event_id: int, name: str):
    return (AlertDelivery.event == event_id) & (AlertDelivery.channel == name)


def _claim(event_id: int, name: str, now: int, lease: int) -> int | None:
    """Take the delivery for this tick; its attempt number, or None if another tick has it."""
    with db.connected(), db.write_transaction():
        won = (AlertDelivery.update(claimed_until=lease, attempts=AlertDelivery.attempts + 1,
                                    updated_at=now)
               .where(_key(event_id, name) & _PENDING & (AlertDelivery.next_at <= now)
                      & (AlertDelivery.claimed_until <= now)).execute())
        if not won:
            return None
        return AlertDelivery.select(AlertDelivery.attempts).where(_key(event_id, name)).scalar()


def _record(event_id: int, name: str, attempts: int, ok: bool, reason: str, now: int,
            give_up: bool = False) -> str:
    if ok:
        outcome, values = "sent", {"outcome": "sent", "last_error": None}
    elif give_up or attempts >= MAX_ATTEMPTS:
        outcome, values = "given_up", {"outcome": "given_up", "last_error": reason}
    else:
        wait = RETRY_AFTER[min(attempts, len(RETRY_AFTER)) - 1]
        outcome, values = "retrying", {"last_error": reason, "next_at": now + wait}
    with db.connected(), db.write_transaction():
        AlertDelivery.update(claimed_until=0, updated_at=now, **values).where(
            _key(event_id, name)).execute()
    return outcome
