"""Step 2, queue: each new event becomes one pending delivery per channel, or is held, held
back or found too old, by the alert tuning (snooze, quiet hours, alert_after) that every
sender applies alike here."""
from __future__ import annotations

from peewee import SQL

from qlshadow.storage import db
from qlshadow.storage.models import INSTANCE_RUNNING, AlertDelivery, AlertEvent, Cron, RunningInstance
from qlshadow.watch import outage

MAX_EVENT_AGE = 86400  # an event first seen later than this (no channel until then) is not sent

_NEW = AlertEvent.status == SQL("0")  # literal: the partial index alert_events_new
_OPEN = RunningInstance.status == SQL(str(INSTANCE_RUNNING))


# AlertEvent.status: 0 new (also while the gate holds it), 1 queued for the channels,
# 2 too old to send, 3 held back (the gate held it and the problem ended meanwhile, or a
# recovery from a problem that was held back: nothing to tell).
QUEUED, TOO_OLD, HELD_BACK = 1, 2, 3


def queue_events(channels: list, now: int) -> int:
    """Give each new event one pending delivery per channel; returns the events queued.

    The alert tuning gates it here, so every sender (the tick, the service's own) applies
    it alike (docs/ALERTS.md "Tuning"): an event of a snoozed or quiet cron stays new until
    the window ends; then it is sent only if it is still the cron's latest event (the
    problem is still there), else held back; a `failed` event waits for the cron's
    `alert_after`-th failure in a row; a recovery is held back when the problem before it was.
    """
    with db.connected():
        new = list(AlertEvent.select(AlertEvent.id, AlertEvent.cron, AlertEvent.state,
                                     AlertEvent.previous, AlertEvent.at).where(_NEW)
                   .order_by(AlertEvent.id).limit(1000).tuples())
        if not new:
            return 0
        # An outage's misses go out as its one message, not one by one, whichever sender
        # queues them (the tick or the service's own). Only the events read here are
        # judged: one recorded since waits for the next pass, so fold sees it first.
        folded = outage.fold(now, new)
        new = [(event_id, cron_id, at, state) for event_id, cron_id, state, _previous, at
               in new if event_id not in folded]
        if not new:
            return 0
        latest = {cron_id: event_id for event_id, cron_id, _at, _state in new}
        tuning = _tuning(latest)
        decided = {}  # event id -> status given in this pass; a held event gets none
        for event_id, cron_id, at, state in new:
            status = _gate(event_id, cron_id, at, state, tuning.get(cron_id), latest,
                           decided, now)
            if status is not None:
                decided[event_id] = status
        if not decided:
            return 0  # only held events: a later tick (or sender) judges them again
        queued = 0
        with db.write_transaction():
            for event_id, status in decided.items():
                won = (AlertEvent.update(status=status)
                       .where((AlertEvent.id == event_id) & _NEW).execute())
                if won and status == QUEUED:
                    AlertDelivery.insert_many([
                        {"event": event_id, "channel": c.name, "outcome": "pending",
                         "attempts": 0, "next_at": now, "claimed_until": 0, "updated_at": now}
                        for c in channels]).execute()
                    queued += 1
        return queued


def _tuning(cron_ids) -> dict:
    """{cron id: (alert_after, snooze_until, quiet)} of those crons that tune their alerts."""
    rows = (Cron.select(Cron.id, Cron.alert_after, Cron.snooze_until, Cron.quiet)
            .where(Cron.id.in_(list(cron_ids))).tuples())
    return {cron_id: (after or 1, snooze, quiet) for cron_id, after, snooze, quiet in rows
            if (after or 1) > 1 or snooze is not None or quiet}


def _gate(event_id, cron_id, at, state, tuned, latest, decided, now) -> int | None:
    """The status an event gets now (QUEUED, TOO_OLD, HELD_BACK), or None to hold it."""
    from qlshadow.core.schedule import in_quiet, quiet_between
    held_before = False
    if tuned is not None:
        after, snooze, quiet = tuned
        if (snooze is not None and snooze > now) or in_quiet(quiet, now):
            return None  # snoozed or quiet: judged again when the window ends
        held_before = ((snooze is not None and snooze >= at) or quiet_between(quiet, at, now)
                       or (state == "failed" and after > 1))
        if latest[cron_id] != event_id and held_before:
            return HELD_BACK  # it ended while held: a later event tells the cron's state
        if state == "failed" and after > 1 and failures_in_a_row(cron_id, after) < after:
            return None
    if state == "ok" and _previous_status(cron_id, event_id, decided) == HELD_BACK:
        return HELD_BACK  # the receiver never heard of the problem it recovers from
    if now - at > MAX_EVENT_AGE and not held_before:
        return TOO_OLD  # a held event is sent only while its problem is still there
    return QUEUED


def failures_in_a_row(cron_id: int, most: int) -> int:
    """How many of the cron's newest finished executions with an exit code failed in a row
    (at most `most`), counted from its Legacy instances (kept with Shadow off too, up to
    QL_RETENTION_ROWS_PER_CRON per cron; running_instances_cron serves the read)."""
    codes = (RunningInstance.select(RunningInstance.exit_code)
             .where((RunningInstance.cron == cron_id) & ~_OPEN
                    & RunningInstance.exit_code.is_null(False))
             .order_by(RunningInstance.id.desc()).limit(most).tuples())
    count = 0
    for (code,) in codes:
        if code == 0:
            break
        count += 1
    return count


def _previous_status(cron_id: int, event_id: int, decided: dict):
    """The status of the cron's event before this one (this pass's decision if it made one)."""
    row = (AlertEvent.select(AlertEvent.id, AlertEvent.status)
           .where((AlertEvent.cron == cron_id) & (AlertEvent.id < event_id))
           .order_by(AlertEvent.id.desc()).limit(1).tuples().first())
    if row is None:
        return None
    return decided.get(row[0], row[1])
