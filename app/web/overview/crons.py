"""The crons list and one cron's summary: health's state in words, problems first, with
each cron's strip."""
from __future__ import annotations

from qlshadow.watch import health
from qlshadow.i18n import N_, _
from qlshadow.storage.models import Cron, cron_status_word
from qlshadow.web.overview.schedule_text import describe_schedule
from qlshadow.web.overview.strip import _clock_steps, strip_slots

# Health states in words, the problems first: the order of the crons list.
STATE_WORDS = {"failed": N_("Failed"), "missed": N_("Missed a firing"), "stuck": N_("Stuck"),
               "late": N_("Late"), "running": N_("Running"), "new": N_("New, never ran"),
               "paused": N_("Paused"), "ok": N_("OK"), "unknown": N_("Not evaluated")}
_RANK = {state: i for i, state in enumerate(STATE_WORDS)}


def _list_key(found: dict) -> tuple:
    # Problems in the order failed, missed, stuck, late, each newest first; then the rest
    # by state, newest cron first.
    problem = found["state"] in health.PROBLEMS
    return (_RANK.get(found["state"], len(_RANK)), -(found["since"] or 0) if problem else 0,
            -found["cron_id"])


def cron_rows(page: int, size: int, now: int, shadow: bool, daemon: str | None = None) -> dict:
    """One page of crons, problems first, each with its health and its strip."""
    found = sorted(health.read_all(now, shadow=shadow, daemon=daemon), key=_list_key)
    total = Cron.select().count()
    start = (page - 1) * size
    ids = [h["cron_id"] for h in found[start:start + size]]
    if len(ids) < size and total > len(found):
        # Past health's cap (health.MAX_CRONS, lowest ids): the newest crons, unevaluated.
        beyond = (Cron.select(Cron.id).where(Cron.id > max((h["cron_id"] for h in found), default=0))
                  .order_by(Cron.id.desc()).offset(max(0, start - len(found)))
                  .limit(size - len(ids)))
        ids += [row.id for row in beyond]
    by_id = {h["cron_id"]: h for h in found}
    crons = {c["id"]: c for c in Cron.select().where(Cron.id.in_(ids)).dicts()} if ids else {}
    recent = health.recent_executions(ids, shadow) if ids else {}
    schedules = health.Schedules(now)  # health's own firings reader, shared by every row
    steps = _clock_steps(now) if ids else []
    rows = []
    for cron_id in ids:
        cron = crons.get(cron_id)
        if cron is None:  # deleted between the two reads
            continue
        state = by_id.get(cron_id) or unevaluated(cron)
        rows.append(cron_summary(cron, recent.get(cron_id, []), state, schedules, now, steps))
    return {"rows": rows, "total": total}


def cron_detail(cron: dict, now: int, shadow: bool, daemon: str | None = None) -> tuple:
    """(health, summary) of one cron, as its line in the list shows it."""
    found = health.read_all(now, shadow=shadow, cron_id=cron["id"], daemon=daemon)
    found = found[0] if found else unevaluated(cron)
    recent = health.recent_executions([cron["id"]], shadow)[cron["id"]]
    return found, cron_summary(cron, recent, found, health.Schedules(now), now,
                               _clock_steps(now))


def unevaluated(cron: dict) -> dict:
    """A health entry for a cron health did not evaluate (past its cap)."""
    return {"cron_id": cron["id"], "state": "unknown", "since": None, "next_expected": None,
            "last_success": None, "last_start": cron["last_execution_time"], "grace": None,
            "reason": _("Only the first {count} crons get a health state.").format(
                count=health.MAX_CRONS),
            "running_since": None}


def cron_summary(cron: dict, executions: list, found: dict, schedules, now: int,
                 steps: list = ()) -> dict:
    """The fields a cron's line on the page shows: its health and its strip."""
    status = cron_status_word(cron["status"])
    if cron["is_disabled"]:
        status = "disabled"
    finished = max((e for e in executions if not e.open), key=lambda e: e.start, default=None)
    duration = cron["last_running_time"]
    if duration is None and finished is not None and finished.end is not None:
        # The callback leaves last_running_time alone for a run under a second: the
        # execution's own times still say how long it ran.
        duration = max(0, finished.end - finished.start)
    return {
        "id": cron["id"], "name": cron["name"], "command": cron["command"],
        "schedule": cron["schedule"], "schedule_text": describe_schedule(cron["schedule"]),
        "status": status, "state": found["state"],
        "state_text": _(STATE_WORDS[found["state"]]) if found["state"] in STATE_WORDS
        else found["state"],
        "reason": found["reason"], "since": found["since"],
        "alert_mark": health.alert_mark_text(found),  # snoozed until T, quiet: nothing sent
        "next_expected": found["next_expected"], "last_success": found["last_success"],
        "last_start": found["last_start"] or cron["last_execution_time"],
        "grace": found["grace"], "last_duration": duration,
        "last_exit_code": finished.exit_code if finished else None,
        "strip": strip_slots(cron, executions, found, schedules, now, steps=steps),
    }
