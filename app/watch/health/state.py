"""A cron's health state and its reason, from its facts (a pure function, no SQL).

evaluate takes a cron, its recent executions, its firings around now and now, and gives
the first state that holds in the order paused, stuck, missed, failed, late, running, new,
ok (docs/CONTRACT.md §13.1 defines them); order lists healths problems first, public keeps
the fields GET /open/crons/health answers.
"""
from __future__ import annotations

from qlshadow.i18n import _
from qlshadow.timefmt import local_text
from qlshadow.watch.health.conditions import (CONDITIONS, open_conditions, open_counts, overlaps,
                                              stuck_limit)
from qlshadow.watch.health.facts import NO_FIRINGS, Firings
from qlshadow.watch.health.missed import default_grace, missed_after, missed_or_late

# Every state, the problems first. evaluate() takes the first that holds in the order
# paused, stuck, missed, failed, late, running, new, ok (docs/CONTRACT.md §13.1).
STATES = ("failed", "missed", "stuck", "late", "running", "new", "paused", "ok")
PROBLEMS = ("failed", "missed", "stuck", "late")
# Listing order: problems (newest first), then these groups in this order.
_GROUP = {"running": 1, "new": 2, "paused": 3, "ok": 4}
PUBLIC_FIELDS = ("cron_id", "name", "schedule", "state", "since", "next_expected",
                 "last_success", "last_start", "grace", "reason", "snoozed_until", "quiet",
                 "open")
_MINUTE = 60


def alert_marks(cron: dict, now: int) -> dict:
    """Whether the cron's alerts wait now (still judged and shown, nothing sent): its
    snooze's end while it lasts (else None), and quiet (True inside its quiet hours)."""
    from qlshadow.core.schedule import in_quiet
    snooze = cron.get("snooze_until")
    return {"snoozed_until": snooze if snooze is not None and snooze > now else None,
            "quiet": in_quiet(cron.get("quiet"), now)}


def alert_mark_text(health: dict) -> str:
    """"snoozed until T" and/or "quiet", or "" (the page and the CLI show it by the state)."""
    marks = []
    if health.get("snoozed_until"):
        marks.append(_("snoozed until {at}").format(at=_when(health["snoozed_until"])))
    if health.get("quiet"):
        marks.append(_("quiet"))
    return ", ".join(marks)


def _when(t: int) -> str:
    return local_text(t, with_seconds=False)  # any stored time, 32-bit time_t included


def evaluate(cron: dict, executions: list, firings: Firings, now: int,
             last_success: int | None = None, steps: list = (), daemon: str | None = None,
             max_runtime: int | None = None, hosts: dict | None = None) -> dict:
    """The health of one cron: {cron_id, name, schedule, state, since, ...} (a pure function).

    executions: its recent Executions (any order); firings: its schedule near now
    (NO_FIRINGS when crond never starts it); last_success: when it last succeeded, for a
    cron whose recent executions hold no success; steps: the clock steps near now
    (firing_times.clock_steps), whose firings are never missed or late; daemon: the cron
    daemon's kind (host.crond.daemon_kind): unless it starts overlapping runs, a firing
    that came while the previous run was open was skipped by crond, not missed; hosts:
    {host id: (name, first seen, last seen)} for an `each` cron judged per host
    (judge_per_host): each host's firings are missed or late over its own executions, only
    those after it first recorded itself and at or before it was last seen (a firing after
    its last sighting is its silence, not a miss); None: over all executions together.
    """
    from qlshadow.watch.firing_times import in_clock_step
    execs = sorted(executions, key=lambda e: e.start, reverse=True)
    if max_runtime is None:
        max_runtime = cron.get("max_runtime")  # a per-cron column, where the schema has it
    grace = cron.get("grace")
    if grace is None:
        grace = default_grace(firings)
    newest = execs[0] if execs else None
    finished = [e for e in execs if not e.open]
    succeeded = next((e for e in finished if e.exit_code == 0), None)
    if succeeded is not None:
        last_success = succeeded.end if succeeded.end is not None else succeeded.start
    health = {"cron_id": cron["id"], "name": cron["name"], "schedule": cron["schedule"],
              "state": "ok", "since": None, "next_expected": None,
              "last_success": last_success, "last_start": newest.start if newest else None,
              "grace": grace, "reason": "", "running_since": None,
              "open": dict.fromkeys(CONDITIONS, 0), **alert_marks(cron, now)}

    def state(name: str, since, reason: str) -> dict:
        health.update(state=name, since=since, reason=reason)
        return health

    if cron["is_disabled"]:
        return state("paused", cron["updated_at"], _("It is disabled, so crond does not start it."))
    health["next_expected"] = firings.next
    limit, why = stuck_limit(execs, grace, max_runtime)
    known: list = []  # the daemon's answer, once asked

    def overlapping() -> bool:
        if not known:
            known.append(overlaps(daemon))
        return known[0]
    conditions = open_conditions(execs, limit, now, overlapping)
    health["open"] = open_counts(conditions)
    # For the page: each open execution's condition, and how firings are judged.
    health.update(conditions=conditions, stuck_limit=limit,
                  overlapping=not callable(daemon) and overlapping())
    if newest is not None and newest.open:
        health["running_since"] = newest.start
    stuck = min((e.start for e in execs if conditions.get(e.start, ("",))[0] == "stuck"
                 and e.open), default=None)
    if stuck is not None:
        return state("stuck", stuck + limit,
                     _("It has been running since {since}, longer than {why}; the process "
                       "hangs or its finish callback was lost.").format(
                           since=_when(stuck), why=why))

    # Firings the current definition describes: after its creation and its last change.
    judged_from = max(cron["created_at"], cron["updated_at"])
    due = [f for f in firings.due if f > judged_from and not in_clock_step(f, steps)]

    def gap(mine: list, since: int, seen: int | None = None) -> tuple:
        # (missed firing, since, late firing) over these executions, firings after `since`
        # (and at or before `seen`, when the host was last seen).
        return missed_or_late([f for f in due if f > since and (seen is None or f <= seen)],
                              mine, since, firings, grace, limit, now, overlapping)

    if hosts is None:
        missed, missed_since, late = gap(execs, judged_from)
        where = ""
    else:  # an `each` cron on several hosts: each host's firings over its own executions
        found = {name: gap([e for e in execs if e.host == host_id], max(judged_from, first),
                           last)
                 for host_id, (name, first, last) in hosts.items()}
        missing = {n: g for n, g in found.items() if g[0] is not None}
        if missing:
            # The reason names the first firing missed and the hosts that missed it;
            # missed_hosts every host that missed one.
            missed = min(g[0] for g in missing.values())
            missed_since = min(g[1] for g in missing.values())
            late = None
            where = ", ".join(n for n in sorted(missing) if missing[n][0] == missed)
            health["missed_hosts"] = sorted(missing)
        else:
            missed = None
            lates = {n: g[2] for n, g in found.items() if g[2] is not None}
            late = min(lates.values(), default=None)
            where = ", ".join(sorted(lates))
    if missed is not None:
        # The reason names the firing itself (the alert quotes it), not when it was seen.
        health["missed_firing"] = missed
        text = (_("The firing at {at} has no record on host {hosts} {grace} s after it: "
                  "crond did not start it there, or its callbacks were lost.") if where else
                _("The firing at {at} has no record {grace} s after it: crond did not start "
                  "it, or its callbacks were lost."))
        return state("missed", missed_since,
                     text.format(at=_when(missed), grace=grace, hosts=where))

    last = finished[0] if finished else None
    if last is not None and last.exit_code not in (0, None):
        streak = last
        for e in finished[1:]:
            if e.exit_code in (0, None):
                break
            streak = e
        text = (_("Its last execution (a manual run), started {start}, exited with code {code}.")
                if last.scheduled is False else
                _("Its last execution, started {start}, exited with code {code}."))
        return state("failed", streak.end if streak.end is not None else streak.start,
                     text.format(start=_when(last.start), code=last.exit_code))
    if late is not None:
        text = (_("The firing at {at} has no record yet on host {hosts}; it counts as missed "
                  "after {deadline}.") if where else
                _("The firing at {at} has no record yet; it counts as missed after "
                  "{deadline}."))
        return state("late", late + _MINUTE,
                     text.format(at=_when(late), deadline=_when(missed_after(late, grace)),
                                 hosts=where))
    if newest is not None and newest.open and conditions[newest.start][0] == "running":
        return state("running", newest.start,
                     _("It has been running since {since}.").format(since=_when(newest.start)))
    if not execs:
        if firings is NO_FIRINGS:
            text = _("It has never run, and no firing is expected (@once, @boot, 6 fields, "
                     "extra schedules, or a date that never comes).")
        else:
            text = _("It has never run, and no firing has come due since it was created or "
                     "last changed.")
        return state("new", cron["created_at"], text)
    streak = last  # not None: the newest execution is finished, or it returned above
    for e in finished[1:]:
        if e.exit_code not in (0, None):
            break
        streak = e
    text = (_("Its last execution, started {start}, exited with code 0.") if last.exit_code == 0
            else _("Its last execution, started {start}, exited with no exit code reported."))
    return state("ok", streak.end if streak.end is not None else streak.start,
                 text.format(start=_when(last.start)))


def order(healths: list) -> list:
    """Problems first, newest first; then running, new, paused and ok crons, by id."""
    def key(h):
        if h["state"] in PROBLEMS:
            return (0, -(h["since"] or 0), h["cron_id"])
        return (_GROUP[h["state"]], 0, h["cron_id"])
    return sorted(healths, key=key)


def public(health: dict) -> dict:
    """The fields GET /open/crons/health answers for one cron."""
    return {k: health[k] for k in PUBLIC_FIELDS}
