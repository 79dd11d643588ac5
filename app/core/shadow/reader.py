"""Read side of Shadow: Runs with their Attempt and events, and accept failures (no Flask)."""
from __future__ import annotations

import re

from peewee import Tuple

from qlshadow.storage.models import LOST_AT_REBOOT, ShadowFailure, ShadowRun
from qlshadow.core.fleet import host_filter, host_names
from qlshadow.core.shadow import LOST_AT_REBOOT_WORDS, ORIGINS, TRIGGERS, run_state
from qlshadow.core.shadow.ids import (MAX_SECONDS, PROJECT_ID, attempt_id, request_id_of,
                                      seconds_of_run_id, uuid_bytes, uuid_text)

UUID_TEXT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def logical_row(stored: dict) -> dict:
    """The full Run of one stored (slim) row: every column older releases stored.

    Each derived value is a function of stored ones (models.ShadowRun says which), so the
    published Run is the same as when every field was stored.
    """
    seconds = stored["accepted_at"]
    request_id = request_id_of(seconds, stored["request_uuid"])
    origin = ORIGINS[stored["origin"]]
    trigger_type, triggered_by, owner = TRIGGERS[origin]
    created = seconds + stored["created_after"]
    events = f"accepted@{created} spawned@{created}"
    if stored["created_running"]:
        events += f" running@{created}"
    state = run_state(stored["finished_at"])
    exited = state == "exited"
    if exited:
        events += f" exited@{stored['finished_at']}"
    return {
        "project_id": PROJECT_ID, "idempotency_key": request_id,
        "id": uuid_text(stored["id"]),
        # No writer stores seconds past MAX_SECONDS; a row edited so has no Attempt id.
        "attempt_id": attempt_id(request_id, seconds) if 0 <= seconds <= MAX_SECONDS else None,
        "request_id": request_id, "task_identity": f"legacy-cron:{stored['cron_id']}",
        "cron_id": stored["cron_id"], "task_revision": bytes(stored["task_revision"]).hex(),
        "origin": origin, "trigger_type": trigger_type, "triggered_by": triggered_by,
        "execution_owner": owner, "accepted_at": seconds, "state": state,
        "pid": stored["pid"], "log_path": stored["log_path"],
        "started_at": None if stored["started_after"] is None else seconds + stored["started_after"],
        "finished_at": stored["finished_at"],
        "exit_code": stored["exit_code"], "events": events,
        # A Run changes twice at most: when made, and when it exits (then finished_at).
        "recorded_at": stored["finished_at"] if exited else created,
    }


def to_json(stored: dict, hosts: dict | None = None) -> dict:
    """The logical Run, Attempt and Events of one stored row; hosts: fleet.host_names()."""
    row = logical_row(stored)
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
        "host": (hosts or {}).get(stored.get("host_id")),
        "attempt": {"id": row["attempt_id"], "run_id": row["id"], "number": 1,
                    "state": row["state"], "pid": row["pid"], "log_path": row["log_path"],
                    "started_at": row["started_at"], "exited_at": row["finished_at"],
                    "exit_code": row["exit_code"]},
        "events": events,
    } | ({"outcome": LOST_AT_REBOOT_WORDS} if stored["created_running"] == LOST_AT_REBOOT else {})


def list_runs(cron_id: int | None, state: str | None, limit: int, before: str | None, *,
              since: int | None = None, until: int | None = None, failed: bool = False,
              host: str | None = None) -> list:
    """Runs newest first by run id (which orders by accepted_at); before= pages on.

    since/until bound accepted_at (until excluded); failed keeps exited Runs whose exit
    code is not 0; host keeps the Runs of one host (by name).

    The order is written (accepted_at, id): the same order as id alone, since a run id
    begins with its accepted seconds, but the one that the table's key and the index
    shadow_runs_cron hold, so no query scans or sorts the table.
    """
    query = ShadowRun.select()
    if cron_id is not None:
        query = query.where(ShadowRun.cron_id == cron_id)
    if state in ("accepted", "spawned"):  # states no stored Run is in (run_state)
        return []
    if state is not None:
        query = query.where(ShadowRun.finished_at.is_null(state == "running"))
    if failed:
        query = query.where(ShadowRun.finished_at.is_null(False), ShadowRun.exit_code != 0)
    if since is not None:
        query = query.where(ShadowRun.accepted_at >= since)
    if until is not None:
        query = query.where(ShadowRun.accepted_at < until)
    hosts = host_names()
    if host is not None:
        query = query.where(host_filter(ShadowRun.host_id, host))
    if before is not None:
        # Any UUID works as a cursor: a Run sorts before it exactly when its accepted
        # seconds are below the cursor's whole seconds, or equal with a smaller id.
        seconds = int(before[:8] + before[9:13], 16) // 1000
        query = query.where(Tuple(ShadowRun.accepted_at, ShadowRun.id)
                             < Tuple(seconds, uuid_bytes(before)))
    query = query.order_by(ShadowRun.accepted_at.desc(), ShadowRun.id.desc()).limit(limit)
    return [to_json(r, hosts) for r in query.dicts()]


def get_run(run_id: str) -> dict | None:
    """One Run by its id, or None (found by the table's key (accepted_at, id))."""
    seconds = seconds_of_run_id(run_id)
    if seconds is None:
        return None
    row = (ShadowRun.select()
           .where(ShadowRun.accepted_at == seconds, ShadowRun.id == uuid_bytes(run_id))
           .dicts().get_or_none())
    return to_json(row, host_names()) if row else None


def list_failures(limit: int, before: int | None) -> list:
    """Accept failures newest first; before= (a failure id) pages on."""
    query = ShadowFailure.select().order_by(ShadowFailure.id.desc()).limit(limit)
    if before is not None:
        query = query.where(ShadowFailure.id < before)
    return [dict(r) for r in query.dicts()]
