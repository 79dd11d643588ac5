"""The reconciliation gate: do the Shadow Runs match what crond really did? (no Flask)

On demand and read-only: it evaluates each active cron's schedule over a window the way
BusyBox crond does, and compares the firings with the Shadow Runs, the Legacy instances
and the accept failures of that window. Runs are read as a range of (accepted_at) or
(cron_id, accepted_at), so a week of Runs costs the same whatever the table holds before or
after it; a cron's Legacy instances are read whole (retention bounds them), through the
index on (cron_id, id) the product already keeps.

Schedules are matched by cronsim; this module only decides which wall-clock minutes map
to which instants (BusyBox crond tests every real minute by its local time: a minute in
the spring-forward gap never fires, one in the autumn repeat fires twice) and BusyBox's
day-of-month / day-of-week rule. docs/SHADOW.md explains both.
"""
from __future__ import annotations

import calendar
import functools
import time

from qlshadow import timefmt
from qlshadow.i18n import _
from qlshadow.storage.db import is_sqlite
from qlshadow.storage.models import Cron, database
from qlshadow.parse import TIME_MAX
from qlshadow.core.schedule import field_count
from qlshadow.core.shadow.ids import uuid_text

DAY = 86400
MAX_WINDOW = 31 * DAY  # firings are enumerated one by one: keep a call bounded
MAX_LISTED = 100  # most firings listed in `missed` and in `double`; the rest are counted


class ReconcileError(ValueError):
    """Bad input to the gate; the message names the field."""


def _check(since: int, until: int, cron_id, stuck_after: int, tolerance: float) -> None:
    for name, value in (("since", since), ("until", until)):
        if type(value) is not int or not 0 <= value <= TIME_MAX:
            raise ReconcileError(f"'{name}' must be epoch seconds between 0 and {TIME_MAX}.")
    if type(stuck_after) is not int or stuck_after < 0:
        raise ReconcileError("'stuck_after' must be a non-negative integer (seconds).")
    if cron_id is not None and (type(cron_id) is not int or cron_id < 1):
        raise ReconcileError("'cron_id' must be a positive integer.")
    if until <= since:
        raise ReconcileError("'until' must be later than 'since'.")
    if until - since > MAX_WINDOW:
        raise ReconcileError(f"the window from 'since' to 'until' must be at most {MAX_WINDOW // DAY} days.")
    # Local time is read up to two days past 'until' (LocalClock); past the host's last
    # local second it cannot be.
    limit = timefmt.local_limit() - 2 * DAY
    if until > limit:
        raise ReconcileError(f"'until' must be at most {limit} ({timefmt.utc_text(limit)}): "
                             "this host's local time ends soon after (2038 with a 32-bit time_t).")
    if not isinstance(tolerance, (int, float)) or not 0 <= tolerance <= 1:
        raise ReconcileError("'tolerance' must be a share between 0 and 1.")


def reconcile(since: int, until: int, cron_id: int | None = None, stuck_after: int = 3600,
              tolerance: float = 0.01, now: int | None = None) -> dict:
    """The gate's report for [since, until): {"window", "gate", "crons"} (read-only)."""
    _check(since, until, cron_id, stuck_after, tolerance)
    now = int(time.time()) if now is None else now
    clock = LocalClock(since - 2 * DAY, until + 2 * DAY)
    # One read transaction: every count comes from the same snapshot. It takes no write
    # lock (SQLite's plain BEGIN), so callbacks keep being written meanwhile.
    with database.atomic():
        query = Cron.select().order_by(Cron.id)
        if cron_id is not None:
            query = query.where(Cron.id == cron_id)
        crons = list(query.dicts())
        if cron_id is not None and not crons:
            raise ReconcileError(f"'cron_id' {cron_id} does not exist.")
        crons = [cron for cron in crons if cron_id is not None or is_active(cron)]
        ids = [cron["id"] for cron in crons]
        failures = _failures(since, until)
        stats = _stats(ids, since, until, now - stuck_after)
        unmatched, instance_starts = _unmatched(ids, since, until)
        steps = clock_steps(since, until)
        reports = [_guarded_report(cron, since, until, now, stuck_after, tolerance, clock,
                                   failures.get(cron["id"], {}), stats.get(cron["id"]),
                                   unmatched.get(cron["id"], 0),
                                   instance_starts.get(cron["id"], ()), steps)
                   for cron in crons]
    gate = _gate(reports, failures, cron_id)
    return {"window": {"since": since, "until": until}, "gate": gate, "crons": reports}


def is_active(cron: dict) -> bool:
    """True when system mode writes the cron as an active crontab line (app/host/crontab.py)."""
    return (not cron["is_disabled"] and field_count(cron["schedule"]) == 5
            and cron["extra_schedules"] in (None, "", "[]"))


# --- firings ---------------------------------------------------------------------------------

class LocalClock:
    """The host's local time (libc's TZ, as crond sees it) between two instants.

    Holds the periods of constant UTC offset, so turning a wall-clock minute into the
    instants that show it is integer arithmetic: none in a spring-forward gap, two in an
    autumn repeat, one otherwise.
    """

    def __init__(self, lo: int, hi: int):
        periods = []
        start, offset = lo, time.localtime(lo).tm_gmtoff
        # Hourly samples find every change (no zone keeps an offset for under an hour);
        # each change is then narrowed to its second.
        t = lo
        while t < hi:
            step = min(3600, hi - t)
            after = time.localtime(t + step).tm_gmtoff
            if after != offset:
                a, b = t, t + step  # offset(a) == offset, offset(b) == after
                while b - a > 1:
                    mid = (a + b) // 2
                    if time.localtime(mid).tm_gmtoff == offset:
                        a = mid
                    else:
                        b = mid
                periods.append((start, b, offset))
                start, offset = b, after
            t += step
        periods.append((start, hi + 1, offset))
        self.periods = periods
        self.offsets = sorted({p[2] for p in periods})

    def covering(self, wall_lo: int, wall_hi: int) -> list:
        """The periods any instant showing a wall time in [wall_lo, wall_hi) can fall in."""
        return [p for p in self.periods
                if p[0] < wall_hi - self.offsets[0] and p[1] > wall_lo - self.offsets[-1]]

    def instants(self, wall: int) -> list:
        """Instants whose local time is `wall` (wall-clock seconds counted as if UTC)."""
        return [wall - off for lo, hi, off in self.periods if lo <= wall - off < hi]


def _day_rule(schedule: str) -> list:
    """cronsim expressions whose union matches the days BusyBox crond matches.

    BusyBox ignores a day field that holds every value and otherwise ORs day-of-month with
    day-of-week; Vixie cron (and cronsim) AND them when either field starts with '*'.
    They differ for e.g. '*/2' with a weekday, or '1-31' with a weekday.
    """
    from cronsim import CronSim
    from datetime import datetime
    fields = schedule.split()
    parsed = CronSim(schedule, datetime(2000, 1, 1))
    all_days = len(parsed.days) == 31
    all_weekdays = {d % 7 for d in parsed.weekdays} == set(range(7))
    if all_days:
        fields[2] = "*"
    if all_weekdays:
        fields[4] = "*"
    if all_days or all_weekdays or not (fields[2].startswith("*") or fields[4].startswith("*")):
        return [" ".join(fields)]
    # Both restricted, one written with a leading '*': OR them as two expressions.
    return [" ".join(fields[:4] + ["*"]), " ".join(fields[:2] + ["*", fields[3], fields[4]])]


@functools.lru_cache(maxsize=64)  # crons often share a time of day (*/5, 0 *, ...)
def _times_of_day(minute: str, hour: str) -> tuple:
    """Seconds after midnight of the wall-clock minutes the two fields match, by cronsim."""
    from cronsim import CronSim
    from datetime import datetime, timedelta
    day = datetime(2000, 1, 1)
    times = []
    for match in CronSim(f"{minute} {hour} * * *", day - timedelta(seconds=1)):
        if match.day != day.day:
            break
        times.append(match.hour * 3600 + match.minute * 60)
    return tuple(times)


def firings(schedule: str, lo: int, hi: int, clock: LocalClock) -> list:
    """The instants in [lo, hi) at which BusyBox crond starts a 5-field schedule, sorted."""
    # Lazy: only the gate needs a cron evaluator, never the callback path.
    from cronsim import CronSim
    from datetime import datetime, timedelta
    # A cron line matches a wall-clock minute when its day matches and its time of day
    # matches, independently; so cronsim is asked for the matching days of the window and
    # for the matching times of one day, instead of for every firing (a week of an
    # every-minute cron is 10,080 of them).
    times = _times_of_day(*schedule.split()[:2])
    epoch = datetime(1970, 1, 1)
    wall_lo = lo + clock.offsets[0]
    wall_hi = hi + clock.offsets[-1]
    first_day = (wall_lo - wall_lo % DAY) - DAY  # cronsim answers strictly after its start
    days = set()
    for expression in _day_rule(f"0 0 {' '.join(schedule.split()[2:])}"):
        for match in CronSim(expression, epoch + timedelta(seconds=first_day + DAY - 1)):
            wall = calendar.timegm(match.timetuple())
            if wall >= wall_hi:
                break
            days.add(wall)
    found = []
    for wall_day in sorted(days):
        periods = clock.covering(wall_day, wall_day + DAY)
        if len(periods) == 1:  # no offset change near this day: plain arithmetic
            shift = periods[0][2]
            found.extend(w - shift for w in (wall_day + t for t in times)
                         if lo <= w - shift < hi)
        else:
            for t in times:
                found.extend(i for i in clock.instants(wall_day + t) if lo <= i < hi)
    return sorted(set(found))


def next_firing(schedule: str, after: int, clock_hi: int) -> int | None:
    """The first firing after `after` within the next 31 days (for "needs" reasons)."""
    hi = min(clock_hi, after + MAX_WINDOW, timefmt.local_limit() - DAY)
    if hi <= after:
        return None
    found = firings(schedule, after, hi, LocalClock(after - DAY, hi + DAY))
    return found[0] if found else None


# --- reads -------------------------------------------------------------------------------

def _sql(text: str) -> str:
    param = database.obj.param
    return text if param == "?" else text.replace("?", param)


# What the gate counts per cron, in one statement for every cron of the report.
_STATS = (
    'SELECT "cron_id", COUNT(*), '
    # A Run has exited exactly when it has finished_at (shadow.run_state).
    'SUM(CASE WHEN "finished_at" IS NOT NULL THEN 1 ELSE 0 END), '
    'SUM(CASE WHEN "finished_at" IS NOT NULL AND "exit_code" <> 0 THEN 1 ELSE 0 END), '
    'SUM(CASE WHEN "created_running" = ? THEN 1 ELSE 0 END), '
    'SUM(CASE WHEN "finished_at" IS NULL AND "accepted_at" < ? THEN 1 ELSE 0 END), '
    'MIN({revision}), MAX({revision}) '
    'FROM "shadow_runs" WHERE {where} '
    'GROUP BY "cron_id"')
# With several crons on SQLite the window is read as a range of the table's key
# (accepted_at, id): one sequential pass, where the index shadow_runs_cron would cost a
# key lookup per Run; rows of other crons are dropped here.
_BY_KEY = '"accepted_at" >= ? AND "accepted_at" < ?'
_BY_CRON = '"accepted_at" >= ? AND "accepted_at" < ? AND '

# Firings are matched with Runs by minute: shadow_runs_cron (cron_id, accepted_at, id) alone
# answers both (no row is read), the second in its own order.
# Per minute and host: an `each` cron runs once per firing on each host it names, a `one`
# cron once per firing in the whole fleet (core/fleet.py).
_RUN_MINUTES = ('SELECT "accepted_at" / 60, "host_id", COUNT(*) FROM "shadow_runs" '
                'WHERE "cron_id" = ? AND "accepted_at" >= ? AND "accepted_at" < ? '
                'GROUP BY "accepted_at" / 60, "host_id"')
_RUN_IDS = ('SELECT "id" FROM "shadow_runs" WHERE "cron_id" = ? AND "accepted_at" >= ? '
            'AND "accepted_at" < ? ORDER BY "accepted_at", "id"')
# The window's instances are read once, through running_instances_cron (cron_id, id): all of
# each cron's kept instances, which retention bounds (QL_RETENTION_ROWS_PER_CRON,
# QL_RETENTION_DAYS), with started_at filtered row by row. An index on (cron_id, started_at)
# would read only the window, but costs a page written per callback at steady state for an
# on-demand report (docs/SHADOW.md "Cost" has both measured).
# A Legacy instance and its Run come from the same running callback: same cron, pid and
# start second, and task.sh makes the execution id (the Run's accepted_at) from that very
# second. The window's instances are bucketed by day; the Runs are read a day
# at a time (on SQLite as a range of the key: one sequential pass) and joined here. A join
# in SQL, or Runs read per cron through shadow_runs_cron, probes the Run table once per row,
# a key lookup each, several times slower on SQLite.
_RUN_STARTS = ('SELECT "cron_id", "pid", "accepted_at" FROM "shadow_runs" WHERE {where} '
               'AND "started_after" = 0')  # started_at = accepted_at
_INSTANCE_STARTS = ('SELECT "cron_id", "pid", "started_at" FROM "running_instances" '
                    'WHERE {where} AND "started_at" >= ? AND "started_at" < ?')
# shadow_failures is capped (QL3_SHADOW_FAILURE_CAP rows): a scan is bounded.
_FAILURES = ('SELECT "cron_id", "reason", COUNT(*) FROM "shadow_failures" '
             'WHERE "at" >= ? AND "at" < ? GROUP BY "cron_id", "reason"')


# clock_steps is capped (runtime.STEPS_KEPT rows): a scan is bounded.
_STEPS = 'SELECT "lo", "hi", "step", "at" FROM "clock_steps" WHERE "hi" > ? AND "lo" < ?'


def clock_steps(since: int, until: int) -> list:
    """[(lo, hi, step, at)] of the recorded clock steps whose window meets [since, until)."""
    return sorted(tuple(row) for row in database.obj.execute_sql(_sql(_STEPS), (since, until)))


def in_clock_step(at: int, steps: list):
    """The clock step whose window holds the instant, or None: the one test of whether a
    firing is judged `clock step` (the gate, health and the page's strip all ask it)."""
    return next((step for step in steps if step[0] <= at < step[1]), None)


def _in(column: str, ids: list) -> str:
    return f'{column} IN ({", ".join(str(int(i)) for i in ids)})' if ids else "1 = 0"


def _runs_where(ids: list, since: int, until: int) -> tuple:
    """The WHERE clause and parameters that select the window's Runs of crons ids."""
    if is_sqlite() and len(ids) > 1:
        return _BY_KEY, [since, until]
    return _BY_CRON + _in('"cron_id"', ids), [since, until]


def _stats(ids: list, since: int, until: int, stuck_before: int) -> dict:
    """{cron_id: (runs, exited, failed, finish_only, stuck, lowest and highest revision)}."""
    where, params = _runs_where(ids, since, until)
    wanted = set(ids)
    # The revision is stored as bytes; PostgreSQL has no MIN of bytea, so both compare hex.
    revision = ('lower(hex("task_revision"))' if is_sqlite()
                else "encode(\"task_revision\", 'hex')")
    return {row[0]: tuple(int(v) for v in row[1:6]) + tuple(row[6:])
            for row in database.obj.execute_sql(_sql(_STATS.format(where=where,
                                                                   revision=revision)),
                                                [0, stuck_before] + params)
            if row[0] in wanted}


def _unmatched(ids: list, since: int, until: int) -> tuple:
    """({cron_id: Legacy instances started in the window with no Run of the same start},
    {cron_id: start times of its instances in the window})."""
    execute = database.obj.execute_sql
    by_day: dict = {}
    starts_by_cron: dict = {}
    for row in execute(_sql(_INSTANCE_STARTS.format(where=_in('"cron_id"', ids))),
                       (since, until)):
        by_day.setdefault((row[2] - since) // DAY, []).append(tuple(row))
        starts_by_cron.setdefault(row[0], []).append(row[2])
    found: dict = {}
    for day, instances in sorted(by_day.items()):
        lo = since + day * DAY
        where, params = _runs_where(ids, lo, min(until, lo + DAY))
        starts = set(execute(_sql(_RUN_STARTS.format(where=where)), params))
        for row in instances:
            if row not in starts:
                found[row[0]] = found.get(row[0], 0) + 1
    return found, starts_by_cron


def _failures(since: int, until: int) -> dict:
    """{cron_id or None: {reason: count}} of accept failures recorded in the window."""
    found: dict = {}
    for cron_id, reason, count in database.obj.execute_sql(_sql(_FAILURES), (since, until)):
        found.setdefault(cron_id, {})[reason] = int(count)
    return found


# --- one cron --------------------------------------------------------------------------------

def _iso(instant: int) -> str:
    return timefmt.local_text(instant, with_seconds=False)


def _guarded_report(cron: dict, *args) -> dict:
    """_cron_report, or a report that says why this cron cannot be evaluated.

    One cron's data (a schedule stored before today's checks, a value out of range) must not
    cost the other crons their report: its verdict is "insufficient" with the cause. Database
    errors still propagate: they concern every cron alike.
    """
    from peewee import PeeweeException
    try:
        return _cron_report(cron, *args)
    except PeeweeException:
        raise
    except Exception as exc:  # noqa: BLE001 - any fault of this cron's data is reported
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return _unevaluated(cron, _("cannot evaluate: {cause}; fix or delete this cron").format(
            cause=cause))


def _unevaluated(cron: dict, reason: str) -> dict:
    """The report of a cron the gate could not evaluate: no counts, the reason."""
    active = False
    try:
        active = is_active(cron)
    except Exception:  # noqa: BLE001 - the same bad data may break this too
        pass
    return {
        "cron_id": cron["id"], "name": cron["name"], "schedule": cron["schedule"],
        "active": active, "definition_changed": False, "evaluated_from": None,
        "expected": 0, "runs": 0, "exited": 0, "running": 0, "failed": 0, "finish_only": 0,
        "stuck": 0, "missed": [], "missed_omitted": 0, "double": [], "double_omitted": 0,
        "clock_step": 0, "off_schedule": 0, "unmatched_instances": 0, "drift": 0,
        "invalid": 0, "verdict": "insufficient", "reasons": [reason],
    }


def _cron_report(cron: dict, since: int, until: int, now: int, stuck_after: int,
                 tolerance: float, clock: LocalClock, failed: dict, stats, unmatched: int,
                 instance_starts, steps: list = ()) -> dict:
    from qlshadow.core.shadow.writer import cron_revision
    execute = database.obj.execute_sql
    cid = cron["id"]
    runs, exited, failed_runs, finish_only, stuck, low, high = (
        stats or (0, 0, 0, 0, 0, None, None))
    revisions = {low, high} - {None}  # two values exactly when the Runs carry several
    per_minute: dict = {}
    per_host = {}  # the most Runs one host made in each minute
    for m, _host, n in execute(_sql(_RUN_MINUTES), (cid, since, until)):
        per_minute[int(m)] = per_minute.get(int(m), 0) + int(n)
        per_host[int(m)] = max(per_host.get(int(m), 0), int(n))
    if cron.get("hosts_mode") == "one":  # never twice anywhere
        per_host = per_minute

    report = {
        "cron_id": cid, "name": cron["name"], "schedule": cron["schedule"],
        "active": is_active(cron), "definition_changed": False, "evaluated_from": None,
        "expected": 0, "runs": runs, "exited": exited, "running": runs - exited,
        "failed": failed_runs, "finish_only": finish_only, "stuck": stuck,
        "missed": [], "missed_omitted": 0, "double": [], "double_omitted": 0,
        "clock_step": 0, "off_schedule": 0,
        "unmatched_instances": unmatched,
        "drift": failed.get("replay_drift", 0),
        "invalid": failed.get("invalid_execution_id", 0),
        "verdict": "pass", "reasons": [],
    }
    reasons, unsure = report["reasons"], []

    # From when does the current definition describe what crond ran? Firings before the
    # cron existed, or before its last change inside the window, are not judged.
    lo = max(since, cron["created_at"] + 1)
    changed_inside = since <= cron["updated_at"] < until and cron["updated_at"] > cron["created_at"]
    if changed_inside:
        lo = max(lo, cron["updated_at"] + 1)
    current = cron_revision(cron)
    changed_after = cron["updated_at"] >= until and bool(revisions - {current})
    report["definition_changed"] = changed_inside or changed_after or len(revisions) > 1
    if changed_after:
        unsure.append(_("the definition was changed after the window (at {at}) and its schedule "
                        "during the window is unknown; needs a window after that change").format(
                            at=_iso(cron["updated_at"])))
    if not report["active"]:
        unsure.append(_("not active in system mode (disabled, a 6-field or @ schedule, or extra "
                        "schedules): crond does not run it, so there is nothing to compare"))

    hi = min(until, now - 59)  # a firing whose minute has not ended yet is not judged
    expected_at = []
    if report["active"] and not changed_after and lo < hi:
        expected_at = firings(cron["schedule"], lo, hi, clock)
        report["evaluated_from"] = lo
    report["expected"] = len(expected_at)

    missed, double, stepped = [], [], []
    instance_minutes = None
    matched = 0
    for at in expected_at:
        n = per_minute.get(at // 60, 0)
        if n:
            matched += n
            if per_host[at // 60] > 1:
                # A clock set back makes crond run its minutes again: not two daemons.
                (stepped if in_clock_step(at, steps) else double).append(at)
            continue
        if instance_minutes is None:  # needed only when some firing has no Run
            instance_minutes = {s // 60 for s in instance_starts if s >= lo}
        if at // 60 not in instance_minutes:
            # A clock set forward makes crond skip the minutes it jumps over (over an hour)
            # or start them all at once, late: neither is a firing crond missed.
            (stepped if in_clock_step(at, steps) else missed).append(at)
    report["clock_step"] = len(stepped)
    if expected_at:  # Runs in judged minutes that are not firing minutes
        judged = sum(n for m, n in per_minute.items() if m * 60 + 59 >= lo and m * 60 < hi)
        report["off_schedule"] = judged - matched
    report["missed"] = missed[:MAX_LISTED]
    report["missed_omitted"] = max(0, len(missed) - MAX_LISTED)
    report["double"] = [{"at": at, "run_ids": [uuid_text(r) for (r,) in execute(
        _sql(_RUN_IDS), (cid, at, at + 60))]} for at in double[:MAX_LISTED]]
    report["double_omitted"] = max(0, len(double) - MAX_LISTED)

    if missed:
        reasons.append(_("{count} scheduled firing(s) have neither a Run nor a Legacy instance "
                         "(first at {first}): crond did not start them, or both callbacks were "
                         "lost").format(count=len(missed), first=_iso(missed[0])))
    if double:
        reasons.append(_("{count} firing(s) have more than one Run (first at {first}): two "
                         "crond daemons, or the cron in two crontabs").format(
                             count=len(double), first=_iso(double[0])))
    if report["drift"]:
        reasons.append(_("{count} callback(s) were refused as replay drift: the cron's "
                         "definition changed while a run of it was in flight").format(
                             count=report["drift"]))
    lost = finish_only + stuck
    if runs and lost / runs > tolerance:
        reasons.append(_("{lost} of {runs} Runs ({share} %) lost a callback ({finish_only} "
                         "without start, {stuck} running over {after} s); at most {tolerated} % "
                         "is tolerated").format(
                             lost=lost, runs=runs, share=f"{100 * lost / runs:.1f}",
                             finish_only=finish_only, stuck=stuck, after=stuck_after,
                             tolerated=f"{100 * tolerance:g}"))
    if failed_runs:
        reasons.append(_("{failed} of {exited} finished Runs exited with a non-zero code: crond "
                         "started them and the task failed").format(failed=failed_runs,
                                                                    exited=exited))
    if reasons:
        report["verdict"] = "fail"
    elif unsure:
        report["verdict"], report["reasons"] = "insufficient", unsure
    elif not expected_at:
        report["verdict"] = "insufficient"
        upcoming = next_firing(cron["schedule"], max(lo, hi) - 1, max(lo, hi) + MAX_WINDOW)
        text = (_("no scheduled firing in the judged part of the window ({since} to {until}); "
                  "needs a window that covers at least one firing, e.g. the one at {next}")
                if upcoming else
                _("no scheduled firing in the judged part of the window ({since} to {until}); "
                  "needs a window that covers at least one firing"))
        reasons.append(text.format(since=_iso(lo), until=_iso(max(lo, hi)),
                                   next=_iso(upcoming) if upcoming else ""))
    elif not runs:
        report["verdict"] = "insufficient"
        reasons.append(_("{count} firing(s) but no Shadow Run: needs Shadow on "
                         "(QL3_SHADOW_ORIGINS=scheduled_system) and at least one Run to "
                         "compare").format(count=len(expected_at)))
    if stepped:  # explained, never a defect: the host's clock jumped
        step = in_clock_step(stepped[0], steps)
        report["reasons"].append(
            _("{count} firing(s) fell in a step of the clock (first at {first}: it jumped "
              "{step} s, seen at {seen}): crond skips, starts late or repeats the minutes a step "
              "jumps over, so they are judged `clock step`, not missed").format(
                  count=len(stepped), first=_iso(stepped[0]), step=f"{step[2]:+d}",
                  seen=_iso(step[3])))
    if unmatched:  # explained, never a defect: these executions were not crond's
        report["reasons"].append(_("{count} Legacy instance(s) have no Run: manual runs (PUT "
                                   "/open/crons/run, `qlshadow cron run`) or runs without the "
                                   "scheduled_system marker, which never become Runs").format(
                                       count=unmatched))
    return report


def _gate(reports: list, failures: dict, cron_id) -> dict:
    """The whole gate: fail if any cron fails; pass if at least one cron passes."""
    verdicts = [r["verdict"] for r in reports]
    each = _("cron {id} ({name}): {reason}")
    reasons = [each.format(id=r["cron_id"], name=r["name"], reason=reason)
               for r in reports if r["verdict"] == "fail" for reason in r["reasons"]]
    by_reason: dict = {}
    for per_cron in failures.values() if cron_id is None else [failures.get(cron_id, {})]:
        for reason, count in per_cron.items():
            by_reason[reason] = by_reason.get(reason, 0) + count
    if reasons:
        verdict = "fail"
    elif "pass" in verdicts:
        verdict = "pass"
    else:
        verdict = "insufficient"
        reasons = ([each.format(id=r["cron_id"], name=r["name"], reason=reason)
                    for r in reports for reason in r["reasons"]]
                   or [_("no cron is active in system mode: needs at least one enabled 5-field "
                         "cron without extra schedules")])
    return {"verdict": verdict, "reasons": reasons, "failures": by_reason}
