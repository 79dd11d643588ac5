"""One cron's executions (a Legacy instance and its Run as one row), the tail of a task
log, and the Shadow accept failures recorded for a cron."""
from __future__ import annotations

import os

from qlshadow.i18n import _
from qlshadow.storage.models import INSTANCE_RUNNING, ShadowFailure
from qlshadow.web.overview.strip import _open_condition

LOG_LINES = 20  # the last lines of a task log shown on a page,
LOG_BYTES = 8 * 1024  # read from at most this many bytes at the end of the file


# --- one cron's executions ---------------------------------------------------------------

def cron_executions(cron_id: int, shadow: bool, limit: int, before: int | None,
                    found: dict) -> dict:
    """A cron's executions newest first, Runs and Legacy instances merged into one row each.

    {"rows": [...], "next_before": seconds or None}. An instance and a Run are one
    execution when the instance started in the second its Run was accepted (task.sh makes
    the execution id from that second), as health counts them. before= pages on: rows that
    started before that second.
    """
    from qlshadow.service.crons import list_instances
    from qlshadow.core.shadow import reader
    instances = list_instances(cron_id, None, limit + 1, None, until=before)
    runs = reader.list_runs(cron_id, None, limit + 1, None, until=before)
    partners: dict = {}
    for run in runs:
        partners.setdefault(run["accepted_at"], []).append(run)
    rows = []
    for instance in instances:
        same = partners.get(instance["started_at"])
        run = None
        if same:
            run = next((r for r in same if r["attempt"]["pid"] == instance["pid"]), same[0])
            same.remove(run)
        rows.append(_execution_row(instance, run, shadow))
    rows += [_execution_row(None, run, shadow) for left in partners.values() for run in left]
    rows.sort(key=lambda r: (r["start"], r["instance_id"] or 0), reverse=True)
    # Where a source has more rows than were read, rows older than its oldest one read
    # may lack their partner: they belong to the next page, as do rows past the limit.
    cuts = [min(x[key] for x in source) for source, key in
            ((instances, "started_at"), (runs, "accepted_at")) if len(source) > limit]
    if len(rows) > limit:
        cuts.append(rows[limit]["start"])
    next_before = None
    if cuts:
        cut = max(cuts)
        page = [r for r in rows if r["start"] > cut]
        next_before = cut + 1
        if not page:  # more than a page in one second: show a page of it, then go past it
            page, next_before = rows[:limit], cut
        rows = page
    for i, row in enumerate(rows):
        row["kind"], row["stuck_since"] = _row_kind(row, i == 0 and before is None, found)
    return {"rows": rows, "next_before": next_before}


def _execution_row(instance: dict | None, run: dict | None, shadow: bool) -> dict:
    """One execution from its instance, its Run, or both."""
    if instance is not None:
        start, pid, log_path = instance["started_at"], instance["pid"], instance["log_path"]
        finished, code = instance["finished_at"], instance["exit_code"]
        is_open = finished is None and instance["status"] == INSTANCE_RUNNING
    else:
        start, pid, log_path = run["accepted_at"], run["attempt"]["pid"], None
        finished, code, is_open = run["finished_at"], run["exit_code"], run["state"] != "exited"
    if run is not None:
        log_path = log_path or run["attempt"]["log_path"]
        if is_open and run["state"] == "exited":  # the instance's finish was lost, not the Run's
            finished, code, is_open = run["finished_at"], run["exit_code"], False
        pid = pid if pid is not None else run["attempt"]["pid"]
    if run is not None:
        origin = "scheduled"
    else:
        origin = "manual" if shadow else None  # with Shadow off nothing tells them apart
    duration = finished - start if finished is not None and finished >= start else None
    return {"start": start, "finished_at": finished, "exit_code": code, "open": is_open,
            "duration": duration, "pid": pid, "log_path": log_path, "origin": origin,
            "instance_id": instance["id"] if instance else None,
            "run_id": run["id"] if run else None, "run_state": run["state"] if run else None}


def _row_kind(row: dict, newest: bool, found: dict) -> tuple:
    """(kind, since) of one execution row, as the strip draws it."""
    word, since = _open_condition(row["start"], row["open"], newest, row["origin"] != "manual",
                                  found)
    if word is not None:
        return word, (since if word != "running" else None)
    if row["exit_code"] is None:
        return "unknown", None
    return ("ok" if row["exit_code"] == 0 else "failed"), None


# --- task logs ---------------------------------------------------------------------------

def log_tail(log_dir: str, stored: str | None, lines: int = LOG_LINES,
             limit: int = LOG_BYTES) -> dict:
    """The last lines of a task log, read only through app/host/logs.py, at most `limit` bytes.

    {"text", "name", "cut"} (cut: earlier lines are not shown), or {"error": one sentence}.
    """
    from qlshadow.host import logs
    if not stored:
        return {"error": _("Its callbacks named no log file.")}
    try:
        with logs.open_log(log_dir, stored) as fh:
            tail = logs.tail_bytes(fh, limit)
    except logs.LogUnavailable as exc:
        return {"error": _("The log cannot be read: {error}").format(error=exc)}
    text = tail["text"]
    found = text.splitlines()
    if tail["truncated"] and found:
        found = found[1:]  # the first line read is probably cut
    shown = found[-lines:] if lines else []
    return {"text": "\n".join(shown), "name": os.path.basename(stored),
            "cut": tail["truncated"] or len(found) > len(shown), "size": tail["size"]}


def cron_failures(cron_id: int, limit: int) -> list:
    """Shadow accept failures recorded for one cron, newest first."""
    query = (ShadowFailure.select().where(ShadowFailure.cron_id == cron_id)
             .order_by(ShadowFailure.id.desc()).limit(limit))
    return list(query.dicts())
