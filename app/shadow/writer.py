"""The Shadow writer: admit a system-crond callback as exactly one Run (docs/CONTRACT.md).

Called inside the callback's single transaction, after the Legacy writes. Everything it
does runs in a savepoint: drift, conflicts and database errors roll back only the Shadow
write and leave a bounded accept-failure row, so the Legacy result always commits.
No retries, timers or threads: the database's unique key decides every race.
"""
from __future__ import annotations

import json
import logging

from ..db import prebuilt
from ..legacy import NOT_GIVEN, StatusCallback
from ..models import ShadowFailure, database, storable
from .ids import PROJECT_ID, attempt_id, parse_execution_id, revision_doc, run_id, task_revision

log = logging.getLogger("qlshadow.shadow")

ORIGIN = "scheduled_system"
STATES = ("accepted", "spawned", "running", "exited")
RANK = {state: rank for rank, state in enumerate(STATES)}
# The seven fields an exact replay must match, in the order drift is reported.
REPLAY_FIELDS = ("id", "attempt_id", "task_revision", "cron_id", "origin", "request_id",
                 "accepted_at")
DETAIL_MAX = 500
# A valid execution_id has at most 62 characters; an invalid one may be as long as the
# body, and a thousand of those would fill a router's flash, so it is kept truncated.
REQUEST_ID_MAX = 128

def cron_revision(cron: dict) -> str:
    """Task revision of a cron row as stored (extra_schedules is kept as JSON text)."""
    extra = cron["extra_schedules"]
    if extra is not None:
        extra = json.loads(extra)
    return task_revision(revision_doc(
        cron["name"], cron["command"], cron["schedule"], extra, cron["task_before"],
        cron["task_after"], cron["work_dir"], cron["log_name"], cron["allow_multiple_instances"]))


def observe(cb: StatusCallback, crons: dict, now: int, failure_cap: int) -> str:
    """Admit, replay or refuse one callback that carries an execution_id.

    Returns the outcome name (for logs and tests); the HTTP answer never depends on it.
    """
    request_id = cb.execution_id if type(cb.execution_id) is str else None
    if request_id is not None and not storable(request_id):
        request_id = None  # NUL or a lone surrogate: record the failure without the id
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
        # A savepoint on both databases (PostgreSQL would abort the whole transaction on an
        # error outside one). On SQLite it costs two statements but no page writes, and it
        # keeps fail-open true whatever _admit does, not only while each of its paths
        # happens to change one row as its last step.
        with database.atomic():
            outcome, drift = _admit(cb, cron, request_id, seconds, now)
    except Exception as exc:  # fail open: not only database errors, any defect here too
        log.warning("Shadow write for %s failed: %s: %s", request_id, type(exc).__name__,
                    str(exc).splitlines()[0] if str(exc) else "")
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

    execute = database.obj.execute_sql
    if target == "exited":
        # The usual finish: its start made the Run, so one compare-and-set moves it to
        # exited when every replay field matches and it has not exited yet. Anything else
        # (no Run yet, drift, already exited) changes nothing here and is sorted out below.
        if execute(prebuilt(_FINISH_RUN), (
                now, exit_code, now, pid, log_path, f" exited@{now}", PROJECT_ID, request_id,
                *(expected[f] for f in REPLAY_FIELDS))).rowcount:
            return "advanced", ()
    # ON CONFLICT DO NOTHING, not INSERT OR IGNORE: only the key conflict is ignored,
    # a NOT NULL or trigger failure still raises and fails open above.
    if execute(prebuilt(_INSERT_RUN), (
            PROJECT_ID, request_id, f"legacy-cron:{cron['id']}", ORIGIN, "legacy:system-crond",
            "legacy", target, pid, log_path, started, now if target == "exited" else None,
            exit_code, f"accepted@{now} spawned@{now} {target}@{now}", now,
            *(expected[f] for f in REPLAY_FIELDS))).rowcount:
        return "created", ()
    stored = _load(request_id)  # it existed, or another transaction inserted it first

    drift = tuple(f for f in REPLAY_FIELDS if stored[f] != expected[f])
    if drift:
        return "drift", drift
    if RANK[target] <= RANK[stored["state"]]:
        return "replayed", ()
    # The only forward move from a stored state is running -> exited. The state in the WHERE
    # makes it compare-and-set: if a concurrent writer got there first, nothing changes.
    changed = execute(prebuilt(_ADVANCE_RUN), (
        target, now, exit_code, now,
        stored["pid"] if stored["pid"] is not None else pid,
        stored["log_path"] if stored["log_path"] is not None else log_path,
        f"{stored['events']} {target}@{now}", PROJECT_ID, request_id, stored["state"])).rowcount
    return ("advanced" if changed else "replayed"), ()


# The writer's statements, written out once (Peewee would build each on every callback).
_KEY = '"project_id" = ? AND "idempotency_key" = ?'
_LOAD_FIELDS = REPLAY_FIELDS + ("state", "pid", "log_path", "events")
_LOAD_RUN = ("SELECT " + ", ".join(f'"{f}"' for f in _LOAD_FIELDS)
             + f' FROM "shadow_runs" WHERE {_KEY}')
_INSERT_FIELDS = ("project_id", "idempotency_key", "task_identity", "trigger_type",
                  "triggered_by", "execution_owner", "state", "pid", "log_path", "started_at",
                  "finished_at", "exit_code", "events", "recorded_at") + REPLAY_FIELDS
_INSERT_RUN = ('INSERT INTO "shadow_runs" (' + ", ".join(f'"{f}"' for f in _INSERT_FIELDS)
               + ") VALUES (" + ", ".join("?" * len(_INSERT_FIELDS))
               + ') ON CONFLICT ("project_id", "idempotency_key") DO NOTHING')
_ADVANCE_RUN = ('UPDATE "shadow_runs" SET "state" = ?, "finished_at" = ?, "exit_code" = ?, '
                '"recorded_at" = ?, "pid" = ?, "log_path" = ?, "events" = ? '
                f'WHERE {_KEY} AND "state" = ?')
_FINISH_RUN = ('UPDATE "shadow_runs" SET "state" = \'exited\', "finished_at" = ?, "exit_code" = ?, '
               '"recorded_at" = ?, "pid" = COALESCE("pid", ?), "log_path" = COALESCE("log_path", ?), '
               f'"events" = "events" || ? WHERE {_KEY} AND "state" <> \'exited\' AND '
               + " AND ".join(f'"{f}" = ?' for f in REPLAY_FIELDS))


def _load(request_id: str) -> dict | None:
    row = database.obj.execute_sql(prebuilt(_LOAD_RUN), (PROJECT_ID, request_id)).fetchone()
    return None if row is None else dict(zip(_LOAD_FIELDS, row))


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _refuse(reason: str, request_id, cron_id, detail: str, now: int, cap: int) -> str:
    """Record a bounded accept failure; never let it fail the Legacy write."""
    if cap > 0:
        if request_id is not None and len(request_id) > REQUEST_ID_MAX:
            request_id = request_id[:REQUEST_ID_MAX]
        try:
            with database.atomic():
                new_id = ShadowFailure.insert(
                    at=now, reason=reason, request_id=request_id, cron_id=cron_id,
                    detail=detail[:DETAIL_MAX]).execute()
                # Ids only grow, so the newest `cap` rows are those above new_id - cap
                # (one ranged delete on the primary key, no count and no extra index).
                if new_id > cap:
                    ShadowFailure.delete().where(ShadowFailure.id <= new_id - cap).execute()
        except Exception as exc:
            log.warning("could not record Shadow accept failure %s: %s", reason, exc)
    return reason
