"""What the status page shows, read from the tables (no Flask): bounded, read-only queries."""
from __future__ import annotations

from .models import (CRON_DISABLED, CRON_IDLE, CRON_QUEUED, CRON_RUNNING, INSTANCE_RUNNING,
                     Cron, RunningInstance, ShadowFailure)

STRIP = 20  # executions drawn in each cron's strip
CRON_STATUS = {CRON_RUNNING: "running", CRON_IDLE: "idle", CRON_DISABLED: "disabled",
               CRON_QUEUED: "queued"}

# --- schedules in words -----------------------------------------------------------------
# cron-descriptor does this for every form, but costs about 0.4 MiB of RSS and would have
# to be bundled in the .ipk; the forms people actually write are a few lines.
_DAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_DAY_NAMES = {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}


def _num(text: str, names=None) -> int | None:
    if names and text.lower() in names:
        return names[text.lower()]
    return int(text) if text.isascii() and text.isdigit() else None


def _every(text: str, unit: str) -> str | None:
    """'*' -> 'every unit', '*/N' -> 'every N units'; None for anything else."""
    if text == "*":
        return f"every {unit}"
    if text.startswith("*/") and _num(text[2:]):
        n = int(text[2:])
        return f"every {unit}" if n == 1 else f"every {n} {unit}s"
    return None


def describe_schedule(schedule: str) -> str | None:
    """The schedule in plain words for the common forms, or None when it is unusual."""
    if schedule == "@once":
        return "once, when added"
    if schedule == "@boot":
        return "at every boot"
    fields = schedule.split()
    if len(fields) == 6:
        second, fields = fields[0], fields[1:]
        if second != "0":
            every = _every(second, "second")
            if every is None or fields != ["*"] * 5:
                return None
            return every
    if len(fields) != 5:
        return None
    minute, hour, dom, month, dow = fields
    if month != "*":
        return None
    if hour == "*" and dom == "*" and dow == "*":
        every = _every(minute, "minute")
        if every:
            return every
        m = _num(minute)
        return None if m is None else f"every hour at minute {m}"
    m, h = _num(minute), _num(hour)
    if m is None:
        return None
    if h is None:
        every = _every(hour, "hour")
        if every and dom == "*" and dow == "*":
            return f"{every} at minute {m}"
        return None
    at = f"at {h:02d}:{m:02d}"
    if dom == "*" and dow == "*":
        return f"every day {at}"
    if dom == "*":
        if dow in ("1-5", "mon-fri"):
            return f"on weekdays {at}"
        d = _num(dow, _DAY_NAMES)
        return f"every {_DAYS[d]} {at}" if d is not None and d <= 7 else None
    if dow == "*":
        d = _num(dom)
        return f"on day {d} of every month {at}" if d is not None else None
    return None


# --- crons ------------------------------------------------------------------------------

def cron_rows(page: int, size: int) -> dict:
    """One page of crons, newest first, each with its last exit code and recent executions."""
    query = Cron.select().order_by(Cron.id.desc())
    total = query.count()
    crons = list(query.paginate(page, size).dicts())
    recent = recent_instances([c["id"] for c in crons], STRIP)
    rows = []
    for cron in crons:
        executions = recent.get(cron["id"], [])
        finished = next((e for e in executions if e["finished_at"] is not None), None)
        rows.append(cron_summary(cron, executions, finished))
    return {"rows": rows, "total": total}


def cron_summary(cron: dict, executions: list, finished: dict | None) -> dict:
    """The fields a cron's line on the page shows."""
    status = CRON_STATUS.get(cron["status"], str(cron["status"]))
    if cron["is_disabled"]:
        status = "disabled"
    return {
        "id": cron["id"], "name": cron["name"], "command": cron["command"],
        "schedule": cron["schedule"], "schedule_text": describe_schedule(cron["schedule"]),
        "status": status, "last_start": cron["last_execution_time"],
        "last_duration": cron["last_running_time"],
        "last_exit_code": finished["exit_code"] if finished else None,
        "strip": [outcome(e) for e in reversed(executions)],  # oldest first, left to right
    }


def outcome(instance: dict) -> dict:
    """One execution as the strip draws it: its kind, start and a short label."""
    if instance["status"] == INSTANCE_RUNNING and instance["finished_at"] is None:
        kind, text = "running", "running"
    elif instance["exit_code"] is None:
        kind, text = "unknown", "finished, exit code unknown"
    elif instance["exit_code"] == 0:
        kind, text = "ok", "exit 0"
    else:
        kind, text = "failed", f"exit {instance['exit_code']}"
    return {"kind": kind, "text": text, "started_at": instance["started_at"]}


def recent_instances(cron_ids: list, per_cron: int) -> dict:
    """cron id -> its newest Legacy instances (newest first), at most per_cron each."""
    if not cron_ids:
        return {}
    # One range of running_instances_cron (cron_id, id) per cron, newest first: a ranking
    # over all the crons' instances made SQLite read the whole table for a page of crons.
    columns = (RunningInstance.cron.alias("cron_id"), RunningInstance.id,
               RunningInstance.status, RunningInstance.started_at,
               RunningInstance.finished_at, RunningInstance.exit_code)
    out: dict = {}
    for wanted in cron_ids:
        query = (RunningInstance.select(*columns).where(RunningInstance.cron == wanted)
                 .order_by(RunningInstance.id.desc()).limit(per_cron))
        for cron_id, iid, status, started, finished, code in query.tuples():
            out.setdefault(cron_id, []).append({"id": iid, "status": status,
                                                "started_at": started, "finished_at": finished,
                                                "exit_code": code})
    return out


def cron_failures(cron_id: int, limit: int) -> list:
    """Shadow accept failures recorded for one cron, newest first."""
    query = (ShadowFailure.select().where(ShadowFailure.cron_id == cron_id)
             .order_by(ShadowFailure.id.desc()).limit(limit))
    return list(query.dicts())
