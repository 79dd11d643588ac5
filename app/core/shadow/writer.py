"""The Shadow writer: admit a system-crond callback as exactly one Run (docs/CONTRACT.md).

Called inside the callback's single transaction, after the Legacy writes. Everything it
does runs in a savepoint: drift, conflicts and database errors roll back only the Shadow
write and leave a bounded accept-failure row, so the Legacy result always commits.
No retries, timers or threads: the database's unique key decides every race.
"""
from __future__ import annotations

import json
import logging
from contextlib import nullcontext
from operator import itemgetter

from peewee import SQL, fn

from qlshadow.storage.db import Statement, savepoint, slot
from qlshadow.core.legacy import NOT_GIVEN, StatusCallback
from qlshadow.storage.models import DEFINITION_FIELDS, ShadowFailure, ShadowRun, database, storable
from qlshadow.core.shadow import ORIGINS, RUN_STATES, run_state
from qlshadow.core.shadow.ids import (attempt_id, parse_execution_id, request_id_of, request_uuid,
                                      revision_doc, run_id, task_revision, uuid_bytes)

log = logging.getLogger("qlshadow.shadow")

ORIGIN = "scheduled_system"
ORIGIN_CODE = ORIGINS.index(ORIGIN)
RANK = {state: rank for rank, state in enumerate(RUN_STATES)}
# The fields an exact replay must match, in the order drift is reported: the seven of
# CONTRACT §3 and the host the Run ran on (core/fleet.py).
REPLAY_FIELDS = ("id", "attempt_id", "task_revision", "cron_id", "origin", "request_id",
                 "accepted_at", "host")
DETAIL_MAX = 500
# A valid execution_id has at most 62 characters; an invalid one may be as long as the
# body, and a thousand of those would fill a router's flash, so it is kept truncated.
REQUEST_ID_MAX = 128

# Task revision per cron definition: a sha256 over the definition's JSON on every callback
# is wasted work when the definition has not changed. Keyed by the whole definition, so an
# edited cron is a new key; bounded, and cleared when full (crons are few).
_REVISIONS_MAX = 512
_revisions: dict = {}


_definition = itemgetter(*DEFINITION_FIELDS)


def cron_revision(cron: dict) -> str:
    """Task revision of a cron row as stored (extra_schedules is kept as JSON text)."""
    key = _definition(cron)
    revision = _revisions.get(key)
    if revision is None:
        doc = dict(zip(DEFINITION_FIELDS, key, strict=True))
        if doc["extra_schedules"] is not None:
            doc["extra_schedules"] = json.loads(doc["extra_schedules"])
        revision = task_revision(revision_doc(**doc))
        if len(_revisions) >= _REVISIONS_MAX:
            _revisions.clear()
        _revisions[key] = revision
    return revision


def observe(cb: StatusCallback, crons: dict, now: int, failure_cap: int, fail_open: bool = True,
            host_id: int | None = None) -> str:
    """Admit, replay or refuse one callback that carries an execution_id.

    Returns the outcome name (for logs and tests); the HTTP answer never depends on it.
    """
    request_id = cb.execution_id if type(cb.execution_id) is str else None
    cron_id = cb.ids[0] if len(cb.ids) == 1 else None
    seconds = parse_execution_id(cb.execution_id)
    if seconds is None:
        if request_id is not None and not storable(request_id):
            request_id = None  # NUL or a lone surrogate: record the failure without the id
        # (a valid execution_id is ASCII without NUL, so only an invalid one needs the check)
        return _refuse("invalid_execution_id", request_id, cron_id,
                       f"execution_id {_short(cb.execution_id)} is not "
                       "legacy-system:<seconds>:<lowercase uuid v4>",
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
        # A fixed name (Peewee would make a fresh one per call): the same two statements
        # every time, kept prepared by the driver instead of parsed on each callback.
        # fail_open=False (Settings.shadow_savepoint) leaves the savepoint out: what it costs.
        with savepoint("shadow") if fail_open else nullcontext():
            outcome, drift = _admit(cb, cron, request_id, seconds, now, host_id)
    except Exception as exc:  # fail open: not only database errors, any defect here too
        log.warning("Shadow write for %s failed: %s: %s", request_id, type(exc).__name__,
                    str(exc).splitlines()[0] if str(exc) else "")
        return _refuse("writer_error", request_id, cron_id,
                       f"{type(exc).__name__}: {exc}", now, failure_cap)
    if drift:
        return _refuse("replay_drift", request_id, cron_id,
                       "stored Run differs in " + ", ".join(drift), now, failure_cap)
    return outcome


def _admit(cb: StatusCallback, cron: dict, request_id: str, seconds: int, now: int,
           host_id: int | None = None):
    target = "running" if cb.status == 0 else "exited"
    pid = None if cb.pid is NOT_GIVEN else cb.pid
    log_path = None if cb.log_path is NOT_GIVEN else cb.log_path
    exit_code = None if cb.exit_code is NOT_GIVEN or target != "exited" else cb.exit_code
    started = cb.last_execution_time
    started = started if started is not NOT_GIVEN and started > 0 else seconds

    # The statements' slots, in stored form. The seven replay fields (REPLAY_FIELDS) are
    # checked through what is stored: the key (accepted_at, id) finds the Run, so those two
    # match by lookup; request_uuid stands for the request id (the execution id is its
    # prefix, accepted_at and this UUID), and the Attempt id is a function of the request
    # id and accepted_at, so it matches exactly when they do; task_revision, cron_id and
    # origin are compared as stored.
    revision = cron_revision(cron)
    values = {"now": now, "pid": pid, "log_path": log_path, "exit_code": exit_code,
              "accepted_at": seconds, "id": uuid_bytes(run_id(request_id, seconds)),
              "request_uuid": request_uuid(request_id),
              "task_revision": bytes.fromhex(revision), "cron_id": cron["id"],
              "origin": ORIGIN_CODE, "host_id": host_id}
    if target == "exited":
        # The usual finish: its start made the Run, so one compare-and-set moves it to
        # exited when every replay field matches and it has not exited yet. Anything else
        # (no Run yet, drift, already exited) changes nothing here and is sorted out below.
        if _FINISH_RUN.execute(values).rowcount:
            return "advanced", ()
    # ON CONFLICT DO NOTHING, not INSERT OR IGNORE: only the key conflict is ignored,
    # a NOT NULL or trigger failure still raises and fails open above.
    values.update(started_after=started - seconds, finished_at=now if target == "exited" else None,
                  created_after=now - seconds, created_running=1 if target == "running" else 0)
    if _INSERT_RUN.execute(values).rowcount:
        return "created", ()
    stored = _load(values)  # it existed, or another transaction inserted it first

    drift = _drift(stored, request_id, seconds, revision, cron["id"], host_id)
    if drift:
        return "drift", drift
    if RANK[target] <= RANK[run_state(stored["finished_at"])]:
        return "replayed", ()
    # The only forward move from a stored state is running -> exited. "Not finished" in the
    # WHERE makes it compare-and-set: if a concurrent writer got there first, nothing changes.
    changed = _ADVANCE_RUN.execute({
        "now": now, "exit_code": exit_code,
        "pid": stored["pid"] if stored["pid"] is not None else pid,
        "log_path": stored["log_path"] if stored["log_path"] is not None else log_path,
        "accepted_at": seconds, "id": values["id"]}).rowcount
    return ("advanced" if changed else "replayed"), ()


# The writer's statements, built from the model by Peewee once (db.Statement) and then
# only executed: building query objects on every callback was most of its CPU time.
# A Run is found by its key (accepted_at, id), both known from the execution id; the stored
# replay fields are then compared (_admit says how each of the seven is checked).
def _key():
    return (ShadowRun.accepted_at == slot("accepted_at")) & (ShadowRun.id == slot("id"))


_MATCHED = ("request_uuid", "task_revision", "cron_id", "origin")  # stored replay fields
_LOAD_FIELDS = _MATCHED + ("finished_at", "pid", "log_path", "host_id")
# The host is a replay field too; null on SQLite (one host), so compared through COALESCE.
_NO_HOST = SQL("0")
_LOAD_RUN = Statement(lambda: ShadowRun.select(
    *(getattr(ShadowRun, f) for f in _LOAD_FIELDS)).where(_key()))
_INSERT_RUN = Statement(lambda: ShadowRun.insert({
    ShadowRun.pid: slot("pid"),
    ShadowRun.log_path: slot("log_path"), ShadowRun.started_after: slot("started_after"),
    ShadowRun.finished_at: slot("finished_at"), ShadowRun.exit_code: slot("exit_code"),
    ShadowRun.created_after: slot("created_after"),
    ShadowRun.created_running: slot("created_running"),
    ShadowRun.host_id: slot("host_id"),
    **{getattr(ShadowRun, f): slot(f) for f in ("accepted_at", "id") + _MATCHED}})
    .on_conflict(conflict_target=[ShadowRun.accepted_at, ShadowRun.id],
                 action="NOTHING").returning())
_ADVANCE_RUN = Statement(lambda: ShadowRun.update({
    ShadowRun.finished_at: slot("now"),
    ShadowRun.exit_code: slot("exit_code"), ShadowRun.pid: slot("pid"),
    ShadowRun.log_path: slot("log_path")})
    .where(_key() & ShadowRun.finished_at.is_null()))


def _finish_run():
    where = _key() & ShadowRun.finished_at.is_null()
    for f in _MATCHED:
        where &= getattr(ShadowRun, f) == slot(f)
    where &= fn.COALESCE(ShadowRun.host_id, _NO_HOST) == fn.COALESCE(slot("host_id"), _NO_HOST)
    return ShadowRun.update({
        ShadowRun.finished_at: slot("now"),
        ShadowRun.exit_code: slot("exit_code"),
        ShadowRun.pid: fn.COALESCE(ShadowRun.pid, slot("pid")),
        ShadowRun.log_path: fn.COALESCE(ShadowRun.log_path, slot("log_path"))}).where(where)


_FINISH_RUN = Statement(_finish_run)


def _drift(stored: dict, request_id: str, seconds: int, revision: str, cron_id: int,
           host_id: int | None = None) -> tuple:
    """The replay fields (REPLAY_FIELDS order) in which a stored Run differs from a callback.

    id and accepted_at matched by finding the Run under its key; the others are compared as
    stored or, for the Attempt id, recomputed from the stored request id and accepted_at.
    """
    stored_request = request_id_of(seconds, stored["request_uuid"])
    found = {"id": True,
             "attempt_id": attempt_id(stored_request, seconds) == attempt_id(request_id, seconds),
             "task_revision": bytes(stored["task_revision"]).hex() == revision,
             "cron_id": stored["cron_id"] == cron_id,
             "origin": ORIGINS[stored["origin"]] == ORIGIN,
             "request_id": stored_request == request_id, "accepted_at": True,
             "host": stored["host_id"] == host_id}
    return tuple(f for f in REPLAY_FIELDS if not found[f])


def _load(values: dict) -> dict | None:
    row = _LOAD_RUN.execute(values).fetchone()
    return None if row is None else dict(zip(_LOAD_FIELDS, row, strict=True))


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
