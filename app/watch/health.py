"""A health state per cron, from its schedule and its recent history (no Flask).

`evaluate` is a pure function of (cron, recent executions, firings around now, now): the
API, `qlshadow status`, /metrics and a later `notify` tick all call it through `read_all`,
which reads what it needs for every cron in a few statements, each an index seek per cron
(never a scan of the history). docs/CONTRACT.md §13.1 defines the states.
"""
from __future__ import annotations

import bisect
import itertools
import time

from qlshadow.i18n import _
from qlshadow.storage.models import Cron, database
from qlshadow.timefmt import local_text

# Every state, the problems first. evaluate() takes the first that holds in the order
# paused, stuck, missed, failed, late, running, new, ok (docs/CONTRACT.md §13.1).
STATES = ("failed", "missed", "stuck", "late", "running", "new", "paused", "ok")
PROBLEMS = ("failed", "missed", "stuck", "late")
# Listing order: problems (newest first), then these groups in this order.
_GROUP = {"running": 1, "new": 2, "paused": 3, "ok": 4}
PUBLIC_FIELDS = ("cron_id", "name", "schedule", "state", "since", "next_expected",
                 "last_success", "last_start", "grace", "reason", "snoozed_until", "quiet",
                 "open")
# What an open execution is (docs/CONTRACT.md §13.1), the one rule every surface shows
# (status, runs, /open/runs, the page, the gate, /metrics): `running` within its cron's
# stuck limit, `stuck` past it, `finish_lost` once a later execution crond started proves
# it ended (crond starts a line only when its previous run ended; a daemon that starts
# overlapping runs proves nothing so, and its open runs only become stuck).
CONDITIONS = ("running", "stuck", "finish_lost")
# Cron daemons that start a line while its previous run is still going (Vixie/Debian cron,
# cronie): their firings are never skipped, and a later start says nothing of an earlier.
OVERLAPPING = "overlapping"

RECENT = 20  # executions read per cron and per source (Legacy instances, Shadow Runs)
MAX_CRONS = 1000  # one read answers at most this many crons, lowest ids first
GRACE_SHARE = 0.1  # default grace: a tenth of the shortest gap between firings near now,
GRACE_MIN, GRACE_MAX = 60, 3600  # within a minute and an hour
STUCK_FACTOR = 3  # stuck: running longer than 3 x the median of recent successful runs,
STUCK_SAMPLES = 3  # once there are at least this many to take a median of;
STUCK_DEFAULT = 3600  # before that, an hour (and never less than the grace)
_MINUTE = 60
_DAY = 86400
# Windows searched for the firings around now: most schedules fire within the first.
_YEAR = 366 * _DAY
_WINDOWS = (2 * 3600, 2 * _DAY, 32 * _DAY, _YEAR + 32 * _DAY)


class Execution:
    """One execution as both sources tell it: start (task clock), end, exit code, whether it
    is still open, and whether crond started it (True: it has a Run; False: a manual run,
    Shadow on and no Run; None: unknown, Shadow off), and the id of the host it ran on
    (read only for a cron judged per host, else None)."""
    __slots__ = ("start", "end", "exit_code", "open", "scheduled", "pid", "host")

    def __init__(self, start, end, exit_code, open_, scheduled, pid=None, host=None):
        self.start, self.end, self.exit_code = start, end, exit_code
        self.open, self.scheduled, self.pid, self.host = open_, scheduled, pid, host


class Firings:
    """A cron's firings around `now`: the last two whose minute has ended, and the next.

    first_after(t) finds the first firing after t, for when a cron has missed several.
    """

    def __init__(self, due: list, upcoming: int | None, first_after=None):
        self.due, self.next = due, upcoming
        self._first_after = first_after

    def first_after(self, t: int) -> int | None:
        return self._first_after(t) if self._first_after else None

    def is_firing(self, t: int) -> bool:
        """Whether the schedule fires at instant t (False when it cannot tell)."""
        return self._first_after is not None and self._first_after(t - 1) == t

    def shortest_gap(self) -> int | None:
        points = self.due + ([self.next] if self.next is not None else [])
        gaps = [b - a for a, b in itertools.pairwise(points) if b > a]
        return min(gaps) if gaps else None


NO_FIRINGS = Firings([], None)


def default_grace(firings: Firings) -> int:
    """A tenth of the shortest gap between the firings near now, within 60 s and 1 h."""
    gap = firings.shortest_gap()
    if gap is None:
        return GRACE_MAX
    return int(min(GRACE_MAX, max(GRACE_MIN, gap * GRACE_SHARE)))


def stuck_limit(executions: list, grace: int, max_runtime: int | None = None) -> tuple:
    """(seconds, why) after which an open execution counts as stuck: the cron's own
    max_runtime when it has one, else the rule below."""
    if max_runtime:
        return max_runtime, _("{limit} s, its max_runtime").format(limit=max_runtime)
    durations = sorted(e.end - e.start for e in executions
                       if not e.open and e.exit_code == 0 and e.end is not None
                       and e.end >= e.start)
    if len(durations) < STUCK_SAMPLES:
        limit = max(STUCK_DEFAULT, grace)
        return limit, _("{limit} s, as fewer than {samples} successful runs tell how long it "
                        "usually runs").format(limit=limit, samples=STUCK_SAMPLES)
    median = durations[len(durations) // 2]
    limit = max(STUCK_FACTOR * median, grace)
    return limit, _("{limit} s ({factor} x its median run of {median} s, at least its "
                    "grace)").format(limit=limit, factor=STUCK_FACTOR, median=median)


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


def condition(start: int, limit: int, now: int, later_start: int | None = None,
              overlapping: bool = False) -> tuple:
    """(word of CONDITIONS, since) of one open execution started at `start` (a pure function).

    later_start: when the cron's next execution that crond started began (None: none).
    """
    if later_start is not None and not overlapping:
        return "finish_lost", later_start
    if now - start > limit:
        return "stuck", start + limit
    return "running", start


def overlaps(daemon) -> bool:
    """Whether the daemon (a kind, or a function that finds it, called only when needed:
    the tick scans /proc only when the answer matters) starts overlapping runs."""
    return (daemon() if callable(daemon) else daemon) == OVERLAPPING


def open_conditions(executions: list, limit: int, now: int, overlapping=False) -> dict:
    """{start: (condition, since)} of every open execution among a cron's executions.

    Only an execution crond started (or may have: Shadow off) is ended by a later one
    crond started on the same host; a manual run can overlap anything. overlapping: a bool, or a function
    that tells it (asked only when an open execution has a later one).
    """
    by_start = sorted(executions, key=lambda e: e.start)
    found = {}
    for i, e in enumerate(by_start):
        if not e.open:
            continue
        later = None
        if e.scheduled is not False:
            later = next((x.start for x in by_start[i + 1:]
                          if x.scheduled is not False and x.start > e.start
                          and x.host == e.host), None)
        lapping = False  # matters only when a later execution started
        if later is not None:
            lapping = overlapping() if callable(overlapping) else overlapping
        found[e.start] = condition(e.start, limit, now, later, lapping)
    return found


def open_counts(conditions: dict) -> dict:
    """{condition: how many} over CONDITIONS, zero when absent."""
    counts = dict.fromkeys(CONDITIONS, 0)
    for word, _since in conditions.values():
        counts[word] += 1
    return counts


def skipped_by_crond(firing: int, by_start: list, limit: int) -> bool:
    """Whether BusyBox crond skipped the firing because the line's previous run was still
    open then: one crond started before it that finished at or after it, or that has no
    finish, within its stuck limit and before crond started the line again."""
    i = bisect.bisect_left([e.start for e in by_start], firing)
    crond_s = [e for e in by_start[:i] if e.scheduled is not False]
    if not crond_s:
        return False
    e = crond_s[-1]  # crond starts a line only once its previous run ended
    if e.end is not None:
        return e.end >= firing
    return e.open and firing < e.start + limit


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
    {host id: (name, first seen)} for an `each` cron judged per host (judge_per_host):
    each host's firings are missed or late over its own executions (and only after it
    first recorded itself); None: over all executions together.
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

    def gap(mine: list, since: int) -> tuple:
        # (missed firing, since, late firing) over these executions, firings after `since`.
        return _gap([f for f in due if f > since], mine, since, firings, grace, limit, now,
                    overlapping)

    if hosts is None:
        missed, missed_since, late = gap(execs, judged_from)
        where = ""
    else:  # an `each` cron on several hosts: each host's firings over its own executions
        found = {name: gap([e for e in execs if e.host == host_id], max(judged_from, seen))
                 for host_id, (name, seen) in hosts.items()}
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


def _gap(due: list, executions: list, judged_from: int, firings: Firings, grace: int,
         limit: int, now: int, overlapping) -> tuple:
    """(missed, since, late) of one set of executions (a cron's, or one host's of it): the
    first of the last two due firings with no record past its grace and when the cron
    counts as missed (both None when none), else the latest due firing with no record yet
    (None when it has one)."""
    by_start = sorted(executions, key=lambda e: e.start)
    starts = [e.start for e in by_start]
    is_firing = firings.is_firing

    def started(firing: int) -> bool:
        return (firing_started(firing, starts, by_start, grace, is_firing)
                or (skipped_by_crond(firing, by_start, limit) and not overlapping()))

    if not due or started(due[-1]):
        return None, None, None
    missing = [f for f in due[-2:] if not started(f) and now >= missed_after(f, grace)]
    if not missing:
        return None, None, due[-1]
    after = max(judged_from, by_start[-1].start if by_start else judged_from)
    first = firings.first_after(after)
    first = first if first is not None and first <= missing[0] else missing[0]
    return missing[0], missed_after(first, grace), None


def missed_after(firing: int, grace: int) -> int:
    """When a firing with no record counts as missed: its grace after the firing itself, as
    Healthchecks counts a period's grace (not after the end of the firing's minute, which
    made every-minute crons be told 3 minutes after their last finish), and never before
    its minute ended (it is due only then)."""
    return firing + max(grace, _MINUTE)


def firing_started(firing: int, starts: list, by_start: list, grace: int,
                   is_firing=None) -> bool:
    """Whether a record stands for the firing: one in its own minute, or one starting later
    until its grace ran out in a minute that is no firing of its own (is_firing(minute),
    when known: that record stands for its own firing, so a gap before it stays a gap, as
    in the gate); a known manual run only in the firing's own minute (as in the gate)."""
    i = bisect.bisect_left(starts, firing)
    own = firing // _MINUTE
    while i < len(starts) and starts[i] < firing + _MINUTE + grace:
        e = by_start[i]
        minute = e.start // _MINUTE
        if minute == own:
            return True
        if e.scheduled is not False and not (is_firing and is_firing(minute * _MINUTE)):
            return True
        i += 1
    return False


def missed_firings(cron: dict, executions: list, expected: list, grace: int, now: int,
                   steps: list = (), is_firing=None, daemon: str | None = None,
                   max_runtime: int | None = None) -> int:
    """How many of the firings in `expected` have no record and are past their grace (none
    in a clock step, none crond skipped while the previous run was open)."""
    from qlshadow.watch.firing_times import in_clock_step
    by_start = sorted(executions, key=lambda e: e.start)
    starts = [e.start for e in by_start]
    limit = stuck_limit(executions, grace, max_runtime)[0]
    return sum(1 for f in expected
               if now >= missed_after(f, grace) and not in_clock_step(f, steps)
               and not firing_started(f, starts, by_start, grace, is_firing)
               and not (skipped_by_crond(f, by_start, limit) and not overlaps(daemon)))


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


# --- reads -------------------------------------------------------------------------------

# One branch per cron, each an index seek that reads RECENT rows: running_instances_cron
# (cron_id, id), and shadow_runs_cron (cron_id, accepted_at, id), which alone answers the
# Runs' read (no lookup of the row). UNION ALL keeps it one statement on both databases
# (SQLite has no LATERAL).
_INSTANCES = ('SELECT * FROM (SELECT "cron_id", "pid", "started_at", "finished_at", "exit_code" '
              'FROM "running_instances" WHERE "cron_id" = {id} ORDER BY "id" DESC LIMIT {n}) '
              'AS "i{id}"')
_RUN_STARTS = ('SELECT * FROM (SELECT "cron_id", "accepted_at" FROM "shadow_runs" '
               'WHERE "cron_id" = {id} ORDER BY "accepted_at" DESC, "id" DESC LIMIT {n}) '
               'AS "r{id}"')
# The few Runs no instance stands for (their start callback was lost): read whole.
_RUN_ROWS = ('SELECT "cron_id", "accepted_at", "finished_at", "exit_code" '
             'FROM "shadow_runs" WHERE "cron_id" = {id} AND "accepted_at" = {at}')
# A cron with no success among its recent executions: its newest success, index-ordered.
_INSTANCE_SUCCESS = ('SELECT * FROM (SELECT "cron_id", "finished_at" FROM "running_instances" '
                     'WHERE "cron_id" = {id} AND "exit_code" = 0 AND "finished_at" IS NOT NULL '
                     'ORDER BY "id" DESC LIMIT 1) AS "s{id}"')
_CHUNK_MAX = 200  # branches per statement (SQLite allows 500 terms in a compound SELECT)
# The same reads with each row's host, for the crons judged per host (PostgreSQL only: an
# `each` cron naming several hosts), RECENT rows per host it names: the Runs' read then
# looks up each row (host_id is not in shadow_runs_cron), for those crons alone.
_HOST_INSTANCES = _INSTANCES.replace('"exit_code" ', '"exit_code", "host_id" ')
_HOST_RUN_STARTS = _RUN_STARTS.replace('"accepted_at" FROM', '"accepted_at", "host_id" FROM')
_HOST_RUN_ROWS = _RUN_ROWS.replace('"exit_code" ', '"exit_code", "host_id" ')


def _union(template: str, keys: list, n: int = RECENT, limits: dict | None = None):
    """Rows of template for each key (a cron id, or a (cron id, instant) pair); limits:
    {cron id: rows} where a cron reads other than n."""
    limits = limits or {}
    for lo in range(0, len(keys), _CHUNK_MAX):
        sql = " UNION ALL ".join(
            template.format(id=int(k), n=limits.get(k, n)) if not isinstance(k, tuple)
            else template.format(id=int(k[0]), at=int(k[1])) for k in keys[lo:lo + _CHUNK_MAX])
        yield from database.obj.execute_sql(sql)


def recent_executions(ids: list, shadow: bool, per_host: dict | None = None) -> dict:
    """{cron_id: [Execution]}: each cron's newest instances and Runs, merged where they are
    one execution (an instance that started in the very second its Run was accepted, on
    the same host: task.sh makes the execution id from that second).

    per_host: {cron_id: number of hosts} of the crons judged per host: their reads carry
    each row's host and take RECENT rows per host (judge_per_host); the others' are read
    as they always were, with no host."""
    if not per_host:
        return _recent(ids, shadow)
    out = _recent([i for i in ids if i not in per_host], shadow)
    out.update(_recent_per_host([i for i in ids if i in per_host], shadow, per_host))
    return out


def _recent(ids: list, shadow: bool) -> dict:
    instances: dict = {}
    for cron_id, pid, started, finished, code in _union(_INSTANCES, ids):
        instances.setdefault(cron_id, []).append((pid, started, finished, code))
    run_starts: dict = {}
    for cron_id, accepted in _union(_RUN_STARTS, ids):
        run_starts.setdefault(cron_id, []).append(accepted)
    out, lone = {}, []
    for cron_id in ids:
        mine, theirs = instances.get(cron_id, []), run_starts.get(cron_id, [])
        # Where a source holds more history than was read, the other's older rows would
        # find no partner: keep only the span both reads cover.
        cutoff = max(([mine[-1][1]] if len(mine) >= RECENT else [])
                     + ([theirs[-1]] if len(theirs) >= RECENT else []), default=None)
        scheduled = set(theirs)
        execs = [Execution(started, finished, code, finished is None,
                           True if started in scheduled else (False if shadow else None), pid)
                 for pid, started, finished, code in mine
                 if cutoff is None or started >= cutoff]
        seen = {e.start for e in execs}
        lone.extend((cron_id, at) for at in scheduled - seen if cutoff is None or at >= cutoff)
        out[cron_id] = execs
    for cron_id, accepted, finished, code in (_union(_RUN_ROWS, lone) if lone else ()):
        out[cron_id].append(Execution(accepted, finished, code, finished is None, True))
    return out


def _recent_per_host(ids: list, shadow: bool, per_host: dict) -> dict:
    """_recent with each row's host, RECENT rows per host: an instance and a Run are one
    execution when they started in the same second on the same host."""
    limits = {i: RECENT * max(per_host[i], 1) for i in ids}
    instances: dict = {}
    for cron_id, pid, started, finished, code, host in _union(_HOST_INSTANCES, ids,
                                                              limits=limits):
        instances.setdefault(cron_id, []).append((pid, started, finished, code, host))
    run_starts: dict = {}
    for cron_id, accepted, host in _union(_HOST_RUN_STARTS, ids, limits=limits):
        run_starts.setdefault(cron_id, []).append((accepted, host))
    out, lone = {}, set()
    for cron_id in ids:
        mine, theirs, read = instances.get(cron_id, []), run_starts.get(cron_id, []), limits[cron_id]
        cutoff = max(([mine[-1][1]] if len(mine) >= read else [])
                     + ([theirs[-1][0]] if len(theirs) >= read else []), default=None)
        scheduled = set(theirs)
        execs = [Execution(started, finished, code, finished is None,
                           True if (started, host) in scheduled else (False if shadow else None),
                           pid, host)
                 for pid, started, finished, code, host in mine
                 if cutoff is None or started >= cutoff]
        seen = {(e.start, e.host) for e in execs}
        lone.update((cron_id, at, host) for at, host in scheduled - seen
                    if cutoff is None or at >= cutoff)
        out[cron_id] = execs
    keys = sorted({(cron_id, at) for cron_id, at, _host in lone})
    for cron_id, accepted, finished, code, host in (_union(_HOST_RUN_ROWS, keys) if keys
                                                    else ()):
        if (cron_id, accepted, host) in lone:  # not another host's Run of that second
            out[cron_id].append(Execution(accepted, finished, code, finished is None, True,
                                          host=host))
    return out


def judge_per_host(crons: list, now: int) -> dict:
    """{cron_id: {host id: (name, first seen)}} of the crons judged per host: on a shared
    (PostgreSQL) database, each `each` cron naming more than one recorded host (["*"]:
    every recorded host). None of them on SQLite (one host): nothing is read.

    A silent host (its tick unseen for 3 minutes, core/fleet.py) is not judged: its own
    alert already says that it runs nothing (one alert for the outage, not one per cron and
    firing); the firings it missed count again once it is seen, until it runs a later one.
    A named host that never recorded itself runs nothing here and is not judged either."""
    from qlshadow.core import fleet
    from qlshadow.storage.db import is_sqlite
    if is_sqlite():
        return {}
    # The hosts are read only when an `each` cron names several, or every host.
    named = {c["id"]: fleet.cron_hosts(c.get("hosts")) for c in crons if fleet.mode(c) == "each"}
    wide = [c for c in crons if c["id"] in named
            and (fleet.ALL in named[c["id"]] or len(named[c["id"]]) > 1)]
    if not wide:
        return {}
    every = fleet.hosts_seen(now)
    if len(every) < 2:
        return {}
    by_name = {name: (i, first, silent) for i, (name, first, silent) in every.items()}
    out = {}
    for cron in wide:
        names = named[cron["id"]]
        recorded = list(by_name) if fleet.ALL in names else [n for n in names if n in by_name]
        if len(recorded) < 2:
            continue
        out[cron["id"]] = {by_name[n][0]: (n, by_name[n][1]) for n in recorded
                           if not by_name[n][2]}
    return out


def _older_successes(ids: list) -> dict:
    """{cron_id: finished_at} of the newest successful Legacy instance of each cron."""
    return {cron_id: at for cron_id, at in _union(_INSTANCE_SUCCESS, ids)} if ids else {}


# Firings around now, by (schedule, local zone, window): (lo, hi, firings). A schedule's
# firings near now change only with the clock, so reads within two hours share them (each
# entry is worked out two hours ahead). Small: an entry is kept only when it holds at most
# _NEAR_FIRINGS firings (a wide window of a frequent schedule is not); cleared when full.
_NEAR: dict = {}
_NEAR_MAX = 256
_NEAR_FIRINGS = 512


def _zone() -> tuple:
    return (time.timezone, time.altzone, time.daylight, time.tzname)


def near_firings() -> list:
    """This process's cached firings near now in the local zone: [[schedule, window, lo,
    hi, firings]], for a process that starts anew every minute (the notify tick) to keep."""
    zone = _zone()
    return [[schedule, window, lo, hi, found]
            for (schedule, z, window), (lo, hi, found) in _NEAR.items() if z == zone]


def keep_near_firings(entries: list) -> None:
    """Take firings near_firings() gave, worked out in this same local zone."""
    zone = _zone()
    for schedule, window, lo, hi, found in entries[:_NEAR_MAX]:
        _NEAR[(schedule, zone, window)] = (lo, hi, found)


class Schedules:
    """Firings near one `now` for many crons, sharing the local clocks they need."""

    def __init__(self, now: int):
        self.now = now
        self._clocks: dict = {}
        self._found: dict = {}  # (schedule, (lo, hi)) -> firings: crons share schedules
        self._around: dict = {}

    def _firings(self, schedule: str, window: int) -> list:
        """The firings in [now - window, now + window]."""
        now = self.now
        lo, hi = now - window, now + 1 + window
        found = self._found.get((schedule, window))
        if found is None:
            key = (schedule, _zone(), window)
            cached = _NEAR.get(key)
            if cached is not None and cached[0] <= lo and hi <= cached[1]:
                found = [f for f in cached[2] if lo <= f < hi]
            else:
                # Evaluated two hours ahead of now and kept across reads: the next reads
                # of the coming two hours find it there.
                ahead = hi + _WINDOWS[0]
                found = self._evaluate(schedule, lo, ahead)
                if len(found) <= _NEAR_FIRINGS:
                    if len(_NEAR) >= _NEAR_MAX:
                        _NEAR.clear()
                    _NEAR[key] = (lo, ahead, found)
                found = [f for f in found if f < hi]
            self._found[(schedule, window)] = found
        return found

    def _evaluate(self, schedule: str, lo: int, hi: int) -> list:
        from qlshadow.watch.firing_times import LocalClock, firings
        clock = self._clocks.get((lo, hi))
        if clock is None:
            clock = self._clocks[(lo, hi)] = LocalClock(lo - 2 * _DAY, hi + 2 * _DAY)
        return firings(schedule, lo, hi, clock)

    def around(self, schedule: str) -> Firings:
        found = self._around.get(schedule)
        if found is None:
            from cronsim import CronSimError
            try:
                found = self._search(schedule)
            except (CronSimError, ValueError):  # a date no calendar has (31 February)
                found = NO_FIRINGS
            self._around[schedule] = found
        return found

    def _search(self, schedule: str) -> Firings:
        now = self.now
        due_before = now - _MINUTE + 1  # a firing is due once its minute has ended
        due: list = []
        upcoming = None
        for window in _WINDOWS:
            # Both directions in one evaluation; wider only while something is missing.
            found = self._firings(schedule, window)
            due = [f for f in found if f < due_before]
            later = [f for f in found if f > now]
            if upcoming is None and later:
                upcoming = later[0]
            if len(due) >= 2 and upcoming is not None:
                break
        return Firings(due[-2:], upcoming, lambda t: self._first_after(schedule, t))

    def between(self, schedule: str, lo: int, hi: int) -> list:
        """The firings in [lo, hi), lo at most a month before now (else from a month ago)."""
        for window in _WINDOWS[:3]:
            if lo >= self.now - window or window == _WINDOWS[2]:
                return [f for f in self._firings(schedule, window) if lo <= f < hi]
        return []

    def _first_after(self, schedule: str, t: int) -> int | None:
        # The windows around() already used, so their clocks are reused; a streak of misses
        # older than a month is reported from a month ago.
        for window in _WINDOWS[:3]:
            if t + 1 < self.now - window and window != _WINDOWS[2]:
                continue
            found = [f for f in self._firings(schedule, window) if f > t]
            if found:
                return found[0]
        return None


def read_all(now: int | None = None, shadow: bool = True, cron_id: int | None = None,
             count_missed: bool = False, daemon: str | None = None) -> list:
    """The health of every cron (or one), problems first (see order); read-only.

    count_missed adds "missed_recent" to each: the missed firings since the oldest of its
    recent executions (or since it was created or last changed), at most a month back.
    daemon: the cron daemon's kind (evaluate).
    """
    from qlshadow.watch.firing_times import clock_steps, is_active
    now = int(time.time()) if now is None else now
    with database.atomic():  # one snapshot; a read takes no write lock
        query = Cron.select().order_by(Cron.id).limit(MAX_CRONS)
        if cron_id is not None:
            query = query.where(Cron.id == cron_id)
        crons = list(query.dicts())
        ids = [c["id"] for c in crons]
        per_host = judge_per_host(crons, now)
        recent = recent_executions(ids, shadow, {i: len(h) for i, h in per_host.items()})
        lacking = [i for i in ids if recent[i]
                   and not any(not e.open and e.exit_code == 0 for e in recent[i])]
        older = _older_successes(lacking)
        steps = clock_steps(now - _WINDOWS[2], now + 1)  # a few rows, read whole
    schedules = Schedules(now)
    healths = []
    for cron in crons:
        active = is_active(cron)
        firings = schedules.around(cron["schedule"]) if active else NO_FIRINGS
        hosts = per_host.get(cron["id"])
        found = evaluate(cron, recent[cron["id"]], firings, now, older.get(cron["id"]), steps,
                         daemon, hosts=hosts)
        if count_missed:
            found["missed_recent"] = _missed_recent(cron, recent[cron["id"]], found["grace"],
                                                    schedules, now, steps, daemon,
                                                    hosts) if active else 0
        healths.append(found)
    return order(healths)


def _missed_recent(cron: dict, executions: list, grace: int, schedules: Schedules,
                   now: int, steps: list = (), daemon: str | None = None,
                   hosts: dict | None = None) -> int:
    if hosts is not None:  # each host's misses over its own executions, added up
        return sum(_missed_recent({**cron, "created_at": max(cron["created_at"], seen)},
                                  [e for e in executions if e.host == host_id], grace,
                                  schedules, now, steps, daemon)
                   for host_id, (_name, seen) in hosts.items())
    judged_from = max(cron["created_at"], cron["updated_at"]) + 1
    lo = min((e.start for e in executions), default=judged_from)
    lo = max(lo, judged_from, now - 31 * _DAY)
    expected = schedules.between(cron["schedule"], lo, now - max(grace, _MINUTE) + 1)
    fires = set(schedules.between(cron["schedule"], lo, now + 1))
    return missed_firings(cron, executions, expected, grace, now, steps, fires.__contains__,
                          daemon, cron.get("max_runtime"))


# --- open Runs, as every surface words them -----------------------------------------------

# The first Run of a cron after an instant: shadow_runs_cron (cron_id, accepted_at, id) alone
# answers it.
_LATER_RUN = ('SELECT MIN("accepted_at") FROM "shadow_runs" WHERE "cron_id" = {q} '
              'AND "accepted_at" > {q}')


def stuck_limits(ids: list, now: int, shadow: bool = True) -> dict:
    """{cron_id: seconds} after which an open execution of each cron is stuck, as health
    judges it (stuck_limit over its recent executions and its grace)."""
    from qlshadow.watch.firing_times import is_active
    ids = sorted(set(ids))
    if not ids:
        return {}
    crons = {c["id"]: c for c in Cron.select().where(Cron.id.in_(ids)).dicts()}
    recent = recent_executions(list(crons), shadow)
    schedules = Schedules(now)
    limits = {}
    for cron_id in ids:
        cron = crons.get(cron_id)
        if cron is None:  # deleted: its Runs are judged by the default limit
            limits[cron_id] = max(STUCK_DEFAULT, GRACE_MAX)
            continue
        grace = cron.get("grace")
        if grace is None:
            grace = default_grace(schedules.around(cron["schedule"]) if is_active(cron)
                                  else NO_FIRINGS)
        limits[cron_id] = stuck_limit(recent[cron_id], grace, cron.get("max_runtime"))[0]
    return limits


def later_run(cron_id: int, after: int) -> int | None:
    """When the cron's first Run after the instant was accepted, or None."""
    q = database.obj.param
    row = database.obj.execute_sql(_LATER_RUN.format(q=q), (cron_id, after)).fetchone()
    return row[0] if row and row[0] is not None else None


def run_conditions(runs: list, now: int, shadow: bool = True, daemon: str | None = None,
                   limits: dict | None = None) -> dict:
    """{run id: (condition, since)} of the open ones among Runs as the reader gives them
    (every Run is one crond started), by condition()."""
    open_runs = [r for r in runs if r["finished_at"] is None]
    if not open_runs:
        return {}
    overlapping = overlaps(daemon)
    later = {} if overlapping else {r["id"]: later_run(r["cron_id"], r["accepted_at"])
                                    for r in open_runs}
    if limits is None:  # a lost finish needs no limit: read only those of the others
        limits = stuck_limits([r["cron_id"] for r in open_runs if later.get(r["id"]) is None],
                              now, shadow)
    return {r["id"]: condition(r["accepted_at"], limits.get(r["cron_id"], STUCK_DEFAULT), now,
                               later.get(r["id"]), overlapping)
            for r in open_runs}


def with_conditions(runs: list, now: int, shadow: bool = True, daemon: str | None = None,
                    found: dict | None = None) -> list:
    """The Runs, each with its "condition": CONDITIONS' word when open, else "exited"
    ("finish_lost" for a Run a reboot closed). found: run_conditions' answer, if read."""
    from qlshadow.core.shadow import LOST_AT_REBOOT_WORDS
    if found is None:
        found = run_conditions(runs, now, shadow, daemon)
    for r in runs:
        if r["id"] in found:
            r["condition"] = found[r["id"]][0]
        else:  # a Run a reboot closed never told its finish either
            r["condition"] = ("finish_lost" if r.get("outcome") == LOST_AT_REBOOT_WORDS
                              else "exited")
    return runs
