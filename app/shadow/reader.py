"""Read side of Shadow: Runs with their Attempt and events, and accept failures (no Flask)."""
from __future__ import annotations

import re

from peewee import Tuple

from ..models import ShadowFailure, ShadowRun
from .ids import seconds_of_run_id

UUID_TEXT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def to_json(row: dict) -> dict:
    """The logical Run, Attempt and Events of one stored row."""
    events = []
    for seq, item in enumerate(row["events"].split(), 1):
        kind, _, at = item.partition("@")
        events.append({"run_id": row["id"], "attempt_id": row["attempt_id"], "seq": seq,
                       "kind": kind, "at": int(at)})
    return {
        "id": row["id"], "project_id": row["project_id"],
        "idempotency_key": row["idempotency_key"], "request_id": row["request_id"],
        "task_identity": row["task_identity"], "cron_id": row["cron_id"],
        "task_revision": row["task_revision"], "origin": row["origin"],
        "trigger_type": row["trigger_type"], "triggered_by": row["triggered_by"],
        "execution_owner": row["execution_owner"], "accepted_at": row["accepted_at"],
        "scheduled_at": row["accepted_at"], "state": row["state"],
        "exit_code": row["exit_code"], "finished_at": row["finished_at"],
        "recorded_at": row["recorded_at"],
        "attempt": {"id": row["attempt_id"], "run_id": row["id"], "number": 1,
                    "state": row["state"], "pid": row["pid"], "log_path": row["log_path"],
                    "started_at": row["started_at"], "exited_at": row["finished_at"],
                    "exit_code": row["exit_code"]},
        "events": events,
    }


def list_runs(cron_id: int | None, state: str | None, limit: int, before: str | None, *,
              since: int | None = None, until: int | None = None, failed: bool = False) -> list:
    """Runs newest first by run id (which orders by accepted_at); before= pages on.

    since/until bound accepted_at (until excluded); failed keeps exited Runs whose exit
    code is not 0.

    The order is written (accepted_at, id): the same order as id alone, since a run id
    begins with its accepted seconds, but the one that the table's key and the index
    shadow_runs_cron hold, so no query scans or sorts the table.
    """
    query = ShadowRun.select()
    if cron_id is not None:
        query = query.where(ShadowRun.cron_id == cron_id)
    if state is not None:
        query = query.where(ShadowRun.state == state)
    if failed:
        query = query.where(ShadowRun.state == "exited", ShadowRun.exit_code != 0)
    if since is not None:
        query = query.where(ShadowRun.accepted_at >= since)
    if until is not None:
        query = query.where(ShadowRun.accepted_at < until)
    if before is not None:
        # Any UUID works as a cursor: a Run sorts before it exactly when its accepted
        # seconds are below the cursor's whole seconds, or equal with a smaller id.
        seconds = int(before[:8] + before[9:13], 16) // 1000
        query = query.where(Tuple(ShadowRun.accepted_at, ShadowRun.id) < Tuple(seconds, before))
    query = query.order_by(ShadowRun.accepted_at.desc(), ShadowRun.id.desc()).limit(limit)
    return [to_json(r) for r in query.dicts()]


def get_run(run_id: str) -> dict | None:
    """One Run by its id, or None (found by the table's key (accepted_at, id))."""
    seconds = seconds_of_run_id(run_id)
    if seconds is None:
        return None
    row = (ShadowRun.select().where(ShadowRun.accepted_at == seconds, ShadowRun.id == run_id)
           .dicts().get_or_none())
    return to_json(row) if row else None


def list_failures(limit: int, before: int | None) -> list:
    """Accept failures newest first; before= (a failure id) pages on."""
    query = ShadowFailure.select().order_by(ShadowFailure.id.desc()).limit(limit)
    if before is not None:
        query = query.where(ShadowFailure.id < before)
    return [dict(r) for r in query.dicts()]
