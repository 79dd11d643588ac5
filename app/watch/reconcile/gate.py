"""The gate's entry point and its verdict: reconcile() checks the window, reads it in one
snapshot, has each cron judged (cron_report.py) and sums the crons up (no Flask).
"""
from __future__ import annotations

import time

from qlshadow import timefmt
from qlshadow.i18n import _
from qlshadow.storage.models import Cron, database
from qlshadow.parse import TIME_MAX
from qlshadow.watch.firing_times import DAY, MAX_WINDOW, LocalClock, clock_steps, is_active
from qlshadow.watch.reconcile.cron_report import guarded_report
from qlshadow.watch.reconcile.judge import Judge
from qlshadow.watch.reconcile.reads import accept_failures, run_stats, unmatched_instances


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
        failures = accept_failures(since, until)
        stats = run_stats(ids, since, until)
        unmatched, instance_starts = unmatched_instances(ids, since, until)
        steps = clock_steps(since, until)
        judge = Judge(now, stuck_after, daemon)
        judge.prefetch([cid for cid, row in stats.items() if row[0] > row[1]])
        reports = [guarded_report(cron, since, until, now, judge, tolerance, clock,
                                  failures.get(cron["id"], {}), stats.get(cron["id"]),
                                  unmatched.get(cron["id"], 0),
                                  instance_starts.get(cron["id"], ()), steps)
                   for cron in crons]
    gate = _gate(reports, failures, cron_id)
    return {"window": {"since": since, "until": until}, "gate": gate, "crons": reports}


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
