"""The Shadow writer: admit a system-crond callback as exactly one Run (SPEC §4).

Called inside the callback's single transaction, after the Legacy writes. Everything it
does runs in a savepoint: drift, conflicts and database errors roll back only the
savepoint and leave a bounded accept-failure row, so the Legacy result always commits.
No retries, timers or threads: the database's unique key decides every race.
"""
from __future__ import annotations

import logging

from peewee import DatabaseError

from ..legacy import NOT_GIVEN, StatusCallback
from ..models import ShadowFailure, ShadowRun, database
from .ids import PROJECT_ID, attempt_id, parse_execution_id, revision_doc, run_id, task_revision

log = logging.getLogger("qlshadow.shadow")

ORIGIN = "scheduled_system"
STATES = ("accepted", "spawned", "running", "exited")
RANK = {state: rank for rank, state in enumerate(STATES)}
# The seven fields an exact replay must match, in the order drift is reported.
REPLAY_FIELDS = ("id", "attempt_id", "task_revision", "cron_id", "origin", "request_id",
                 "accepted_at")
DETAIL_MAX = 500

_PK = (ShadowRun.project_id, ShadowRun.idempotency_key)


def cron_revision(cron: dict) -> str:
    """Task revision of a cron row as stored (extra_schedules is kept as JSON text)."""
    extra = cron["extra_schedules"]
    if extra is not None:
        import json
        extra = json.loads(extra)
    return task_revision(revision_doc(
        cron["name"], cron["command"], cron["schedule"], extra, cron["task_before"],
        cron["task_after"], cron["work_dir"], cron["log_name"], cron["allow_multiple_instances"]))


def observe(cb: StatusCallback, crons: dict, now: int, failure_cap: int) -> str:
    """Admit, replay or refuse one callback that carries an execution_id.

    Returns the outcome name (for logs and tests); the HTTP answer never depends on it.
    """
    request_id = cb.execution_id if type(cb.execution_id) is str else None
    cron_id = cb.ids[0] if len(cb.ids) == 1 else None
    seconds = parse_execution_id(cb.execution_id)
    if seconds is None:
        return _refuse("invalid_execution_id", request_id, cron_id,
                       f"execution_id {_short(cb.execution_id)} is not legacy-system:<seconds>:<lowercase uuid v4>",
                       now, failure_cap)
    if len(cb.ids) != 1:
        return _refuse("multiple_ids", request_id, None,
                       f"{len(cb.ids)} cron ids in one callback; Shadow admits exactly one",
                       now, failure_cap)
    if cb.status not in (0, 1):
        return _refuse("unsupported_status", request_id, cron_id,
                       f"status {cb.status} is neither running (0) nor idle (1)", now, failure_cap)
    cron = crons.get(cron_id)
    if cron is None:
        return _refuse("unknown_cron", request_id, cron_id, f"cron {cron_id} does not exist",
                       now, failure_cap)
    try:
        with database.atomic():  # a savepoint inside the request's transaction
            outcome, drift = _admit(cb, cron, request_id, seconds, now)
    except DatabaseError as exc:
        return _refuse("writer_error", request_id, cron_id,
                       f"{type(exc).__name__}: {exc}", now, failure_cap)
    if drift:
        return _refuse("replay_drift", request_id, cron_id,
                       "stored Run differs in " + ", ".join(drift), now, failure_cap)
    return outcome


def _admit(cb: StatusCallback, cron: dict, request_id: str, seconds: int, now: int):
    expected = {
        "id": run_id(request_id, seconds),
        "attempt_id": attempt_id(request_id, seconds),
        "task_revision": cron_revision(cron),
        "cron_id": cron["id"],
        "origin": ORIGIN,
        "request_id": request_id,
        "accepted_at": seconds,
    }
    target = "running" if cb.status == 0 else "exited"
    pid = None if cb.pid is NOT_GIVEN else cb.pid
    log_path = None if cb.log_path is NOT_GIVEN else cb.log_path
    exit_code = None if cb.exit_code is NOT_GIVEN or target != "exited" else cb.exit_code
    started = cb.last_execution_time
    started = started if started is not NOT_GIVEN and started > 0 else seconds

    stored = _load(request_id)
    if stored is None:
        created = (ShadowRun.insert(
            project_id=PROJECT_ID, idempotency_key=request_id,
            task_identity=f"legacy-cron:{cron['id']}", trigger_type=ORIGIN,
            triggered_by="legacy:system-crond", execution_owner="legacy",
            state=target, pid=pid, log_path=log_path, started_at=started,
            finished_at=now if target == "exited" else None, exit_code=exit_code,
            events=f"accepted@{now} spawned@{now} {target}@{now}", recorded_at=now,
            **expected)
            .on_conflict(action="nothing", conflict_target=_PK)
            .as_rowcount().execute())
        if created:
            return "created", ()
        stored = _load(request_id)  # another transaction inserted it first

    drift = tuple(f for f in REPLAY_FIELDS if stored[f] != expected[f])
    if drift:
        return "drift", drift
    if RANK[target] <= RANK[stored["state"]]:
        return "replayed", ()
    # The only forward move from a stored state is running -> exited. The state in the WHERE
    # makes it compare-and-set: if a concurrent writer got there first, nothing changes.
    (ShadowRun.update(
        state=target, finished_at=now, exit_code=exit_code, recorded_at=now,
        pid=stored["pid"] if stored["pid"] is not None else pid,
        log_path=stored["log_path"] if stored["log_path"] is not None else log_path,
        events=f"{stored['events']} {target}@{now}")
     .where(ShadowRun.project_id == PROJECT_ID, ShadowRun.idempotency_key == request_id,
            ShadowRun.state == stored["state"])
     .execute())
    return "advanced", ()


def _load(request_id: str) -> dict | None:
    return (ShadowRun.select(*(getattr(ShadowRun, f) for f in REPLAY_FIELDS),
                             ShadowRun.state, ShadowRun.pid, ShadowRun.log_path,
                             ShadowRun.events)
            .where(ShadowRun.project_id == PROJECT_ID, ShadowRun.idempotency_key == request_id)
            .dicts().get_or_none())


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _refuse(reason: str, request_id, cron_id, detail: str, now: int, cap: int) -> str:
    """Record a bounded accept failure; never let it fail the Legacy write."""
    if cap > 0:
        try:
            with database.atomic():
                new_id = ShadowFailure.insert(
                    at=now, reason=reason, request_id=request_id, cron_id=cron_id,
                    detail=detail[:DETAIL_MAX]).execute()
                if new_id > cap:
                    ShadowFailure.delete().where(ShadowFailure.id <= new_id - cap).execute()
        except DatabaseError as exc:
            log.warning("could not record Shadow accept failure %s: %s", reason, exc)
    return reason
