"""The reconciliation gate: do the Shadow Runs match what crond really did? (no Flask)

On demand and read-only: it evaluates each active cron's schedule over a window the way
BusyBox crond does, and compares the firings with the Shadow Runs, the Legacy instances
and the accept failures of that window. Runs are read as a range of (accepted_at) or
(cron_id, accepted_at), so a week of Runs costs the same whatever the table holds before or
after it; a cron's Legacy instances are read whole (retention bounds them), through the
index on (cron_id, id) the product already keeps.

Firings are worked out by firing_times.py (the way BusyBox crond starts lines, and clock
steps; its names are kept here for the gate's callers); open Runs are worded, and
crond's overlap skips told, by health.py's rules.
"""
from __future__ import annotations

import time

from qlshadow import timefmt
from qlshadow.i18n import _
from qlshadow.storage.db import is_sqlite
from qlshadow.storage.models import Cron, database
from qlshadow.parse import TIME_MAX
from qlshadow.core.shadow.ids import uuid_text
from qlshadow.watch.firing_times import (DAY, MAX_WINDOW, LocalClock, _sql, clock_steps,  # noqa: F401
                                         firings, in_clock_step, is_active, next_firing)

MAX_LISTED = 100  # most firings listed in `missed` and in `double`; the rest are counted


class ReconcileError(ValueError):
    """Bad input to the gate; the message names the field."""


def _check(since: int, until: int, cron_id, stuck_after: int, tolerance: float) -> None:
    for name, value in (("since", since), ("until", until)):
        if type(value) is not int or not 0 <= value <= TIME_MAX:
            raise ReconcileError(f"'{name}' must be epoch seconds between 0 and {TIME_MAX}.")
    if stuck_after is not None and (type(stuck_after) is not int or stuck_after < 0):
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


def reconcile(since: int, until: int, cron_id: int | None = None,
              stuck_after: int | None = None, tolerance: float = 0.01, now: int | None = None,
              daemon: str | None = None) -> dict:
    """The gate's report for [since, until): {"window", "gate", "crons"} (read-only).

    stuck_after: seconds after which an open Run is stuck; None: each cron's own limit, as
    health judges it. daemon: the cron daemon's kind (host.crond.daemon_kind): unless it
    starts overlapping runs, a firing that came while the line's previous run was open is
    `skipped (still running)`, not missed.
    """
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
        stats = _stats(ids, since, until)
        unmatched, instance_starts = _unmatched(ids, since, until)
        steps = clock_steps(since, until)
        judge = _Judge(now, stuck_after, daemon)
        judge.prefetch([cid for cid, row in stats.items() if row[0] > row[1]])
        reports = [_guarded_report(cron, since, until, now, judge, tolerance, clock,
                                   failures.get(cron["id"], {}), stats.get(cron["id"]),
                                   unmatched.get(cron["id"], 0),
                                   instance_starts.get(cron["id"], ()), steps)
                   for cron in crons]
    gate = _gate(reports, failures, cron_id)
    return {"window": {"since": since, "until": until}, "gate": gate, "crons": reports}


# --- reads -------------------------------------------------------------------------------

# What the gate counts per cron, in one statement for every cron of the report.
_STATS = (
    'SELECT "cron_id", COUNT(*), '
    # A Run has exited exactly when it has finished_at (shadow.run_state).
    'SUM(CASE WHEN "finished_at" IS NOT NULL THEN 1 ELSE 0 END), '
    'SUM(CASE WHEN "finished_at" IS NOT NULL AND "exit_code" <> 0 THEN 1 ELSE 0 END), '
    'SUM(CASE WHEN "created_running" = ? THEN 1 ELSE 0 END), '
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


def _in(column: str, ids: list) -> str:
    return f'{column} IN ({", ".join(str(int(i)) for i in ids)})' if ids else "1 = 0"


def _runs_where(ids: list, since: int, until: int) -> tuple:
    """The WHERE clause and parameters that select the window's Runs of crons ids."""
    if is_sqlite() and len(ids) > 1:
        return _BY_KEY, [since, until]
    return _BY_CRON + _in('"cron_id"', ids), [since, until]


def _stats(ids: list, since: int, until: int) -> dict:
    """{cron_id: (runs, exited, failed, finish_only, lowest and highest revision)}."""
    where, params = _runs_where(ids, since, until)
    wanted = set(ids)
    # The revision is stored as bytes; PostgreSQL has no MIN of bytea, so both compare hex.
    revision = ('lower(hex("task_revision"))' if is_sqlite()
                else "encode(\"task_revision\", 'hex')")
    return {row[0]: tuple(int(v) for v in row[1:5]) + tuple(row[5:])
            for row in database.obj.execute_sql(_sql(_STATS.format(where=where,
                                                                   revision=revision)),
                                                [0] + params)
            if row[0] in wanted}


# A cron's open Runs of the window, and its Runs around missed firings (whether the line's
# previous run was still open then), through shadow_runs_cron; read only for crons that
# have them.
_OPEN_RUNS = ('SELECT "accepted_at" FROM "shadow_runs" WHERE "cron_id" = ? '
              'AND "accepted_at" >= ? AND "accepted_at" < ? AND "finished_at" IS NULL '
              'ORDER BY "accepted_at"')
# A cron's newest Run, through shadow_runs_cron.
_NEWEST_RUN = ('SELECT "accepted_at", "finished_at" FROM "shadow_runs" WHERE "cron_id" = ? '
               'ORDER BY "accepted_at" DESC, "id" DESC LIMIT 1')
# The last Run before a firing: one seek of shadow_runs_cron, then its row.
_RUN_BEFORE = ('SELECT "accepted_at", "finished_at" FROM "shadow_runs" WHERE "cron_id" = ? '
               'AND "accepted_at" < ? ORDER BY "accepted_at" DESC, "id" DESC LIMIT 1')


class _Judge:
    """What the gate asks health about open Runs: each cron's stuck limit (stuck_after,
    else health's own), the condition of an open Run, and crond's overlap skips."""

    def __init__(self, now: int, stuck_after: int | None, daemon: str | None):
        from qlshadow.watch import health
        self.health, self.now, self.stuck_after = health, now, stuck_after
        self.overlapping = daemon == health.OVERLAPPING
        self._limits: dict = {}

    def prefetch(self, ids: list) -> None:
        """Read the stuck limits of these crons at once (those with open Runs)."""
        if self.stuck_after is None and ids:
            self._limits.update(self.health.stuck_limits(ids, self.now))

    def limit(self, cron_id: int) -> int:
        if self.stuck_after is not None:
            return self.stuck_after
        if cron_id not in self._limits:
            self._limits.update(self.health.stuck_limits([cron_id], self.now))
        return self._limits[cron_id]

    def open_runs(self, cron_id: int, since: int, until: int, count: int) -> dict:
        """{condition: count} of the cron's `count` Runs of the window that have no finish."""
        h = self.health
        counts = dict.fromkeys(h.CONDITIONS, 0)
        if not self.overlapping:
            # Every open Run but the cron's newest has a later one: its finish was lost.
            # So only the newest is read (one seek), never the window's Runs.
            row = database.obj.execute_sql(_sql(_NEWEST_RUN), (cron_id,)).fetchone()
            if row is not None and row[1] is None and since <= row[0] < until:
                counts[h.condition(row[0], self.limit(cron_id), self.now)[0]] += 1
                count -= 1
            counts["finish_lost"] += count
            return counts
        # A daemon that starts overlapping runs: each open Run by its age alone.
        for (at,) in database.obj.execute_sql(_sql(_OPEN_RUNS), (cron_id, since, until)):
            counts[h.condition(at, self.limit(cron_id), self.now, None, True)[0]] += 1
        return counts

    def skipped(self, cron_id: int, missed: list) -> set:
        """The missed firings crond skipped because the line's previous run was open."""
        if self.overlapping or not missed:
            return set()
        # Only the line's last run before a firing can hold it back (crond starts a line
        # only after its run ended).
        h, found = self.health, set()
        for at in missed:
            row = database.obj.execute_sql(_sql(_RUN_BEFORE), (cron_id, at)).fetchone()
            if row is not None and h.skipped_by_crond(
                    at, [h.Execution(row[0], row[1], None, row[1] is None, True)],
                    self.limit(cron_id) if row[1] is None else 0):
                found.add(at)
        return found


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
        "stuck": 0, "finish_lost": 0, "missed": [], "missed_omitted": 0, "double": [],
        "double_omitted": 0, "clock_step": 0, "skipped_running": 0, "off_schedule": 0,
        "unmatched_instances": 0, "drift": 0,
        "invalid": 0, "verdict": "insufficient", "reasons": [reason],
    }


def _cron_report(cron: dict, since: int, until: int, now: int, judge: _Judge,
                 tolerance: float, clock: LocalClock, failed: dict, stats, unmatched: int,
                 instance_starts, steps: list = ()) -> dict:
    from qlshadow.core.shadow.writer import cron_revision
    execute = database.obj.execute_sql
    cid = cron["id"]
    runs, exited, failed_runs, finish_only, low, high = stats or (0, 0, 0, 0, None, None)
    conditions = (judge.open_runs(cid, since, until, runs - exited) if runs > exited
                  else dict.fromkeys(("running", "stuck", "finish_lost"), 0))
    stuck = conditions["stuck"]
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
        "expected": 0, "runs": runs, "exited": exited, "running": conditions["running"],
        "failed": failed_runs, "finish_only": finish_only, "stuck": stuck,
        "finish_lost": conditions["finish_lost"],
        "missed": [], "missed_omitted": 0, "double": [], "double_omitted": 0,
        "clock_step": 0, "skipped_running": 0, "off_schedule": 0,
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
    skipped = judge.skipped(cid, missed)
    if skipped:  # BusyBox crond starts no line while its previous run is still going
        missed = [at for at in missed if at not in skipped]
        report["skipped_running"] = len(skipped)
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
    lost = finish_only + stuck + report["finish_lost"]
    if runs and lost / runs > tolerance:
        after = (_("{after} s").format(after=judge.stuck_after) if judge.stuck_after is not None
                 else _("its stuck limit"))
        reasons.append(_("{lost} of {runs} Runs ({share} %) lost a callback ({finish_only} "
                         "without start, {finish_lost} whose finish was lost, {stuck} running "
                         "over {after}); at most {tolerated} % is tolerated").format(
                             lost=lost, runs=runs, share=f"{100 * lost / runs:.1f}",
                             finish_only=finish_only, finish_lost=report["finish_lost"],
                             stuck=stuck, after=after, tolerated=f"{100 * tolerance:g}"))
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
        if changed_inside and lo >= hi:
            # Judged from its last change or re-enabling: nothing of it has come due yet.
            text = (_("it was changed or enabled again at {at}, and no firing since then has "
                      "ended its minute yet; needs a window that ends after its next firing "
                      "({next})") if upcoming else
                    _("it was changed or enabled again at {at}, and no firing since then has "
                      "ended its minute yet"))
            reasons.append(text.format(at=_iso(cron["updated_at"]),
                                       next=_iso(upcoming) if upcoming else ""))
            upcoming, text = None, None
        else:
            text = (_("no scheduled firing in the judged part of the window ({since} to "
                      "{until}); needs a window that covers at least one firing, e.g. the one "
                      "at {next}") if upcoming else
                    _("no scheduled firing in the judged part of the window ({since} to "
                      "{until}); needs a window that covers at least one firing"))
        if text is not None:
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
    if skipped:  # explained, never a defect: crond does this by design
        report["reasons"].append(
            _("{count} firing(s) came while the previous run was still going (first at "
              "{first}): BusyBox crond does not start a line again before its run ends, so "
              "they are judged `skipped (still running)`, not missed").format(
                  count=len(skipped), first=_iso(min(skipped))))
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
