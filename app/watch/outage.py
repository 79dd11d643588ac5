"""A service outage is one event, not one message per cron (docs/ALERTS.md).

The crontab's tick line (shell/tick.sh) asks the running service to tick. When the service
does not answer, the line starts `qlshadow notify --unanswered WHY`, and that tick opens an
outage here: one row in `service_outages`, whose unique `is_open` lets two ticks open it
once. While it is open, the missed and stuck events the ticks find are folded into it
(status FOLDED: not sent one by one), and so is the "ok again" that later ends such a
folded event. The first tick the service answers again (its own, or a fallback tick given
--answered) closes it with a compare-and-set on `is_open`. Each outage sends two messages,
"not answering" and "answering again" (naming the crons whose events it folded), each
claimed, sent and marked like a delivery (watch/alerts/), so each goes out once per channel.
"""
from __future__ import annotations

import socket

from peewee import IntegrityError

from qlshadow.i18n import _
from qlshadow.storage import db
from qlshadow.storage.models import AlertEvent, Cron, ServiceOutage

FOLDED = 4  # alert_events.status of an event told by its outage's message instead
_FOLDS = ("missed", "stuck")
MAX_ATTEMPTS = 5  # per message, one attempt a tick
CLAIM_MARGIN = 60
KEEP_DAYS = 30  # closed outages kept when QL_RETENTION_DAYS is 0 (off)
MAX_NAMED = 50  # crons named in the "answering again" message; the rest are counted


def note(url: str, answered: bool | None, why: str, now: int) -> bool:
    """Open an outage (answered False) or close the open one (True); None leaves it.
    Returns whether any outage is stored, open or not: with none (as on most boxes) the
    tick skips the rest of this module, one read in all."""
    with db.connected():
        stored = [row[0] for row in ServiceOutage.select(ServiceOutage.is_open).tuples()]
        if answered is None or (1 in stored) == (not answered):
            return bool(stored)  # already open, or nothing to close: nothing is written
        try:
            with db.write_transaction():
                if answered:
                    (ServiceOutage.update(is_open=None, ended_at=now)
                     .where(ServiceOutage.is_open == 1).execute())
                else:
                    ServiceOutage.insert(is_open=1, url=url, reason=why[:500], since=now).execute()
        except IntegrityError:
            pass  # another tick opened it first
    return True


def fold(now: int, new: list) -> set:
    """Mark those of `new` (id, cron id, state, previous, at: the events a sender read as
    new, oldest first) that an outage tells (see the module's docstring); returns their
    ids. The sender queues only the rest of that same list: an event recorded after its
    read waits for the next pass, which folds it too when it is the recovery of a folded
    miss (a callback can record it while the pass that folds the miss runs)."""
    with db.connected():
        spans = [(since, ended if ended is not None else now) for since, ended in
                 ServiceOutage.select(ServiceOutage.since, ServiceOutage.ended_at).tuples()]
        if not spans:
            return set()
        folded = []
        for event_id, cron_id, state, previous, at in new:
            if state in _FOLDS:
                if any(lo <= at <= hi for lo, hi in spans):
                    folded.append(event_id)
            elif state == "ok" and previous in _FOLDS:
                before = (AlertEvent.select(AlertEvent.id, AlertEvent.status)
                          .where((AlertEvent.cron == cron_id) & (AlertEvent.id < event_id))
                          .order_by(AlertEvent.id.desc()).limit(1).tuples().first())
                # Its miss was never told on its own: folded before, or in this pass.
                if before is not None and (before[1] == FOLDED or before[0] in folded):
                    folded.append(event_id)
        if not folded:
            return set()
        with db.write_transaction():  # only events no other sender queued meanwhile
            (AlertEvent.update(status=FOLDED)
             .where(AlertEvent.id.in_(folded) & (AlertEvent.status == 0)).execute())
        return set(folded)


def deliver(settings, channels: list, now: int, send):
    """Send each outage's due messages once per channel; yields each message's outcome
    (sent, retrying, given_up)."""
    with db.connected():
        due = list(ServiceOutage.select()
                   .where((ServiceOutage.down_state == 0)
                          | (ServiceOutage.ended_at.is_null(False) & (ServiceOutage.up_state == 0)))
                   .order_by(ServiceOutage.id))
    for outage in due:
        for which in ("down", "up"):
            if which == "up" and outage.ended_at is None:
                continue
            if getattr(outage, f"{which}_state") != 0:
                continue
            outcome = _send_one(settings, outage, which, channels, now, send)
            if outcome is not None:
                yield outcome


def _send_one(settings, outage, which: str, channels: list, now: int, send) -> str | None:
    state, done, attempts, claim = (getattr(ServiceOutage, f"{which}_{name}")
                                    for name in ("state", "done", "attempts", "claim"))
    lease = now + int(max((c.timeout for c in channels), default=0)) * len(channels) + CLAIM_MARGIN
    with db.connected(), db.write_transaction():
        won = (ServiceOutage.update({claim: lease, attempts: attempts + 1})
               .where((ServiceOutage.id == outage.id) & (state == 0) & (claim <= now)).execute())
        if not won:
            return None  # another tick has it
        taken, tries = (ServiceOutage.select(done, attempts)
                        .where(ServiceOutage.id == outage.id).tuples().get())
    taken = set(filter(None, taken.split(",")))
    title, content = message(settings, outage, which, now)
    failed = False
    for channel in channels:
        if channel.name in taken:
            continue
        if send(channel, title, content).ok:
            taken.add(channel.name)
        else:
            failed = True
    finished = not failed or tries >= MAX_ATTEMPTS
    with db.connected(), db.write_transaction():
        ServiceOutage.update({done: ",".join(sorted(taken)), claim: 0,
                              state: 1 if finished else 0}).where(
            ServiceOutage.id == outage.id).execute()
    if not failed:
        return "sent"
    return "given_up" if finished else "retrying"


def affected(outage) -> list:
    """(cron id, name, state) of the events an outage folded, first of each cron."""
    end = outage.ended_at if outage.ended_at is not None else outage.since
    rows = (AlertEvent.select(AlertEvent.cron, Cron.name, AlertEvent.state)
            .join(Cron, on=(AlertEvent.cron == Cron.id))
            .where((AlertEvent.status == FOLDED) & AlertEvent.state.in_(_FOLDS)
                   & (AlertEvent.at >= outage.since) & (AlertEvent.at <= end))
            .order_by(AlertEvent.id).tuples())
    seen: dict = {}
    for cron_id, name, state in rows:
        seen.setdefault(cron_id, (cron_id, name, state))
    return list(seen.values())


def message(settings, outage, which: str, now: int) -> tuple[str, str]:
    """(title, content) of an outage's "not answering" (down) or "answering again" (up)."""
    from qlshadow.timefmt import local_text
    host = socket.gethostname()
    since = local_text(outage.since)
    if which == "down":
        lines = [_("qlshadow is not answering at {url} since {since}, on {host}: {why}.").format(
                     url=outage.url, since=since, host=host, why=outage.reason.rstrip(".")),
                 _("Crons that miss a firing meanwhile are not told one by one: the message "
                   "that it answers again names them.")]
        return _("qlshadow: the service is not answering"), "\n".join(lines)
    lines = [_("qlshadow is answering again at {url} since {at}, on {host}; it did not answer "
               "from {since}.").format(url=outage.url, at=local_text(outage.ended_at),
                                       host=host, since=since)]
    with db.connected():
        crons = affected(outage)
    if crons:
        lines.append(_("Crons that missed a firing or got stuck meanwhile:"))
        words = {"missed": _("missed a firing"), "stuck": _("stuck")}
        lines += [f'- {cron_id} "{name}": {words[state]}' for cron_id, name, state
                  in crons[:MAX_NAMED]]
        if len(crons) > MAX_NAMED:
            lines.append(_("and {count} more.").format(count=len(crons) - MAX_NAMED))
    else:
        lines.append(_("No cron missed a firing meanwhile."))
    return _("qlshadow: the service is answering again"), "\n".join(lines)


def prune(settings, now: int) -> int:
    """Delete closed outages whose messages are done, older than the retention."""
    cutoff = now - (settings.retention_days or KEEP_DAYS) * 86400
    old = ((ServiceOutage.ended_at < cutoff) & (ServiceOutage.down_state == 1)
           & (ServiceOutage.up_state == 1))
    with db.connected():
        if not ServiceOutage.select(ServiceOutage.id).where(old).exists():
            return 0
        with db.write_transaction():
            return ServiceOutage.delete().where(old).execute()


def open_outage() -> dict | None:
    """The open outage (url, reason, since), or None: for /health and the page."""
    with db.connected():
        return (ServiceOutage.select(ServiceOutage.url, ServiceOutage.reason, ServiceOutage.since)
                .where(ServiceOutage.is_open == 1).dicts().first())
