"""One cron's report in the gate: its firings over the window against its Runs, Legacy
instances and accept failures, and its verdict with the reasons (no Flask).
"""
from __future__ import annotations

from qlshadow import timefmt
from qlshadow.i18n import _
from qlshadow.core.shadow.ids import uuid_text
from qlshadow.watch.firing_times import (MAX_WINDOW, LocalClock, firings, in_clock_step,
                                         is_active, next_firing)
from qlshadow.watch.reconcile.judge import Judge
from qlshadow.watch.reconcile.reads import run_ids, runs_per_minute

MAX_LISTED = 100  # most firings listed in `missed` and in `double`; the rest are counted


def _iso(instant: int) -> str:
    return timefmt.local_text(instant, with_seconds=False)


def guarded_report(cron: dict, *args) -> dict:
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


def _cron_report(cron: dict, since: int, until: int, now: int, judge: Judge,
                 tolerance: float, clock: LocalClock, failed: dict, stats, unmatched: int,
                 instance_starts, steps: list = ()) -> dict:
    from qlshadow.core.shadow.writer import cron_revision
    cid = cron["id"]
    runs, exited, failed_runs, finish_only, low, high = stats or (0, 0, 0, 0, None, None)
    conditions = (judge.open_runs(cid, since, until, runs - exited) if runs > exited
                  else dict.fromkeys(("running", "stuck", "finish_lost"), 0))
    stuck = conditions["stuck"]
    revisions = {low, high} - {None}  # two values exactly when the Runs carry several
    per_minute: dict = {}
    per_host = {}  # the most Runs one host made in each minute
    for m, _host, n in runs_per_minute(cid, since, until):
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
    report["double"] = [{"at": at, "run_ids": [uuid_text(r) for (r,) in run_ids(cid, at, at + 60)]}
                        for at in double[:MAX_LISTED]]
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
