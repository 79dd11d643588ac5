"""The alert tick, every minute from the crontab block's own line (shell/tick.sh): in the
running service, in its sender's thread (service_tick.py, sender.py), or, when the service does not
answer, as `qlshadow notify` in a process of its own (which reports the outage, outage.py).
Either way sending never delays a callback:

1. **Find** what the schedule says and no callback can: crons that missed a firing or are
   stuck (health.py), and a missed or stuck cron that is ok again without a finish saying
   so. Each change is recorded as the callback records its own (events.record_if, a
   compare-and-set on crons.alert_state), so two ticks never record one change twice.
2. **Queue** new events: one delivery row per configured channel, in a short transaction
   that marks the event queued only if it still was new (the first tick to get there wins).
   An event older than MAX_EVENT_AGE when first queued is marked too old and not sent.
3. **Send** due deliveries one at a time: claim (a compare-and-set that takes a lease),
   send outside any transaction, record the outcome. A failed send is tried again on a
   later tick, after RETRY_AFTER, up to MAX_ATTEMPTS in all, then given up. A tick that
   dies while sending leaves its claim to lapse, and a later tick sends again: a message
   may come twice then, never zero times.
4. **Prune** events older than the retention (QL_RETENTION_DAYS) with their deliveries.

With no channel configured the command returns before it opens the database. An idle
tick (nothing changed) reads the crons' health and two empty partial indexes and writes
nothing (docs/ALERTS.md measures it).
"""
from __future__ import annotations

import os
import socket
import time

from peewee import JOIN, SQL, Case, fn

from qlshadow.storage import db
from qlshadow.core import events
from qlshadow.watch import outage
from qlshadow.i18n import N_, _
from qlshadow.storage.models import (INSTANCE_RUNNING, AlertDelivery, AlertEvent, Cron,
                                     RunningInstance)

MAX_ATTEMPTS = 5
RETRY_AFTER = (30, 60, 120, 240)  # seconds after the 1st, 2nd, 3rd, 4th failed attempt
MAX_EVENT_AGE = 86400  # an event first seen later than this (no channel until then) is not sent
SENDS_PER_TICK = 100  # the rest wait for the next tick, so a tick stays within its minute
CLAIM_MARGIN = 60  # a claim lasts the channel's timeout plus this
LOG_LINES = 10
LOG_CHARS = 1500
KEEP_DAYS = 30  # events kept when QL_RETENTION_DAYS is 0 (off): they must not grow forever
NOT_CONFIGURED = "the channel is no longer configured"

_NEW = AlertEvent.status == SQL("0")  # literal: the partial index alert_events_new
_PENDING = AlertDelivery.outcome == SQL("'pending'")  # literal: alert_deliveries_pending
_OPEN = RunningInstance.status == SQL(str(INSTANCE_RUNNING))
# Whole sentences per state, so that each language words them in its own order.
_TITLES = {"failed": N_("{name} failed"), "missed": N_("{name} missed a firing"),
           "stuck": N_("{name} is stuck"), "ok": N_("{name} is ok again")}
_OPENINGS = {"failed": N_('Cron {id} "{name}" failed at {at}, on {host}.'),
             # The reason that follows names the firing; {at} would be when it was noticed.
             "missed": N_('Cron {id} "{name}" missed a firing, on {host}.'),
             "stuck": N_('Cron {id} "{name}" is stuck at {at}, on {host}.'),
             "ok": N_('Cron {id} "{name}" is ok again at {at}, on {host}.')}
_BEFORE = {"failed": N_("It was failed before."), "missed": N_("It was missed before."),
           "stuck": N_("It was stuck before.")}


def tick(settings, channels: list, now: int | None = None, send=None,
         answered: bool | None = None, why: str = "") -> dict:
    """One tick (see the module's docstring); returns what it did, by count.

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


# --- 0. hosts of a fleet -----------------------------------------------------------------

_HOST_TITLES = {"silent": N_("host {name} is silent"), "ok": N_("host {name} is back")}
_HOST_TEXTS = {"silent": N_("Host {name} (qlshadow {version}) was last seen at {at}: crons "
                            "that only it runs do not run now."),
               "ok": N_("Host {name} (qlshadow {version}) is seen again since {at}.")}


def host_changes(channels: list, now: int, send) -> int:
    """Tell each host going silent (its tick unseen for 3 minutes) and coming back, once for
    the whole fleet: the ticks of every host race for a compare-and-set on the host's row,
    and the one that wins sends through every channel (once, not tried again). A shared
    (PostgreSQL) database with two hosts or more; returns the changes this tick sent."""
    from qlshadow.core import fleet
    from qlshadow.storage.models import Host
    from qlshadow.timefmt import local_text
    with db.connected():
        if db.is_sqlite():
            return 0
        hosts = fleet.hosts_listing(now)
        if len(hosts) < 2:  # no other host to tell of this one: not a fleet
            return 0
        alerted = dict(Host.select(Host.name, Host.alert_state).tuples())
    sent = 0
    for host in hosts:
        old = alerted.get(host["name"])
        new = "silent" if host["state"] == "silent" else None
        if new == old:
            continue
        held = Host.alert_state.is_null() if old is None else Host.alert_state == old
        with db.connected(), db.write_transaction():
            won = Host.update(alert_state=new).where((Host.name == host["name"]) & held).execute()
        if not won:
            continue  # another host's tick told it
        state = new or "ok"
        title = "qlshadow: " + _(_HOST_TITLES[state]).format(name=host["name"])
        text = _(_HOST_TEXTS[state]).format(name=host["name"], version=host["version"],
                                            at=local_text(host["last_seen"]))
        for channel in channels:
            send(channel, title, text)
        sent += 1
    return sent


# --- 1. find -----------------------------------------------------------------------------

FIRINGS_FILE = "notify-firings.json"


def _load_firings(settings) -> list:
    """The firings near now that earlier ticks worked out (health keeps them per process:
    each tick is a new process, and working them out is most of an idle tick's own work)."""
    import json
    from qlshadow.watch import health
    path = os.path.join(settings.data_dir, FIRINGS_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            kept = json.load(fh)
        if kept.get("zone") == list(_zone_key()) and kept.get("version") == 2:
            health.keep_near_firings(kept["near"])
            return kept["near"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # none yet, or unreadable: worked out again, and written anew
    return []


def _zone_key() -> tuple:
    return (time.timezone, time.altzone, time.daylight, list(time.tzname))


def _keep_firings(settings, loaded: list, now: int) -> None:
    """Write the firings back only when a tick worked out new ones (about every two hours
    per schedule: each entry covers four hours ahead), so an idle tick writes nothing."""
    import json
    from qlshadow.watch import health
    from qlshadow.files import write_private
    near = [e for e in health.near_firings() if e[3] > now]
    if sorted(tuple(e[:4]) for e in near) == sorted(tuple(e[:4]) for e in loaded):
        return
    try:
        write_private(os.path.join(settings.data_dir, FIRINGS_FILE),
                      json.dumps({"version": 2, "zone": list(_zone_key()), "near": near}))
    except OSError:
        pass  # a cache: the next tick works them out again


def find_changes(settings, now: int) -> int:
    """Record the missed and stuck crons (and their recovery) the schedule shows."""
    from qlshadow.watch import health
    loaded = _load_firings(settings)
    with db.connected():
        from qlshadow.host.crond import kind_for
        # The daemon is looked for in /proc only when a firing or a run needs it.
        healths = health.read_all(now, shadow=settings.shadow_on,
                                  daemon=lambda: kind_for(settings))
        alerted = dict(Cron.select(Cron.id, Cron.alert_state).tuples())
    _keep_firings(settings, loaded, now)
    changes = []
    for h in healths:
        old = alerted.get(h["cron_id"])
        if h["state"] in ("missed", "stuck"):
            new = h["state"]
        elif h["state"] == "ok" and old in ("missed", "stuck"):
            new = "ok"  # its finish was not heard (a lost callback), yet it runs fine again
        else:
            continue
        if new != (old or "ok"):
            changes.append((h, old, new))
    if not changes:
        return 0  # the idle tick: no write transaction at all
    recorded = 0
    with db.connected(), db.write_transaction():
        for h, old, new in changes:
            log_path = None
            if new == "stuck":
                log_path = (RunningInstance.select(RunningInstance.log_path)
                            .where((RunningInstance.cron == h["cron_id"]) & _OPEN)
                            .order_by(RunningInstance.id.desc()).limit(1).scalar())
            recorded += events.record_if(h["cron_id"], old, new, now, log_path=log_path,
                                         reason=h["reason"] or None)
    return recorded


# --- 2. queue ----------------------------------------------------------------------------

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
    def new_events() -> list:
        return list(AlertEvent.select(AlertEvent.id, AlertEvent.cron, AlertEvent.at,
                                      AlertEvent.state).where(_NEW)
                    .order_by(AlertEvent.id).limit(1000).tuples())
    with db.connected():
        new = new_events()
        if not new:
            return 0
        # An outage's misses go out as its one message, not one by one, whichever sender
        # queues them (the tick or the service's own).
        if outage.fold(now):
            new = new_events()
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


# --- 3. send -----------------------------------------------------------------------------

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


def message(settings, event_id: int) -> tuple[str, str] | None:
    """(title, content) of an event: the cron, its state, the time, the exit code and the
    last lines of its log; None when the event is gone."""
    from qlshadow.timefmt import local_text
    with db.connected():
        event = (AlertEvent.select(AlertEvent, Cron.name, Cron.alert_after)
                 .join(Cron, on=(AlertEvent.cron == Cron.id))
                 .where(AlertEvent.id == event_id).dicts().get_or_none())
        if event is not None and event["state"] == "failed" and (event["alert_after"] or 1) > 1:
            event["in_a_row"] = failures_in_a_row(event["cron"], 1000)
    if event is None:
        return None
    name, state = event["name"], event["state"]
    opening = _(_OPENINGS[state]) if state in _OPENINGS else 'Cron {id} "{name}" ' + state + \
        " at {at}, on {host}."
    lines = [opening.format(id=event["cron"], name=name, at=local_text(event["at"]),
                            host=socket.gethostname())]
    previous = event["previous"]
    if previous not in (None, "ok") and state == "ok":
        lines.append(_(_BEFORE[previous]) if previous in _BEFORE
                     else f"It was {previous} before.")
    if event["exit_code"] is not None:
        lines.append(_("Exit code: {code}.").format(code=event["exit_code"]))
    if "in_a_row" in event:  # sent at the alert_after-th failure; the event is the first's
        lines.append(_("It has failed {count} times in a row (its alert_after).").format(
            count=event["in_a_row"]))
    if event["reason"]:
        lines.append(event["reason"])
    tail = log_tail(settings, event["log_path"])
    if tail:
        lines += ["", _("Last lines of its log ({path}):").format(path=event["log_path"]), tail]
    title = _(_TITLES[state]) if state in _TITLES else "{name} " + state
    return f"qlshadow: {title.format(name=name)}", "\n".join(lines)


def log_tail(settings, log_path) -> str:
    """The last LOG_LINES lines of a stored log path (at most LOG_CHARS), or ""."""
    if not log_path:
        return ""
    from qlshadow.host.logs import LogUnavailable, open_log, tail_lines
    try:
        with open_log(settings.log_dir, log_path) as fh:
            data, _ = tail_lines(fh, LOG_LINES)
    except (LogUnavailable, OSError):
        return ""
    text = data.decode("utf-8", "replace").rstrip("\n")
    return text if len(text) <= LOG_CHARS else "..." + text[-LOG_CHARS:]


# --- 4. prune ----------------------------------------------------------------------------

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


# --- the notification log ----------------------------------------------------------------

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
