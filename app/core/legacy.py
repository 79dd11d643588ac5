"""The 2.x status callback: parse its body strictly, apply rules 1-5 (docs/CONTRACT.md).

Unknown keys are ignored on purpose: in 2.x one strictly validated new field made every
status update fail and left tasks stuck "running"; a newer client must never break us.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from peewee import SQL, Case, fn

from qlshadow.core import events
from qlshadow.storage.db import Statement, slot
from qlshadow.errors import InvalidInput
from qlshadow.storage.models import (CRON_IDLE, CRON_RUNNING, DEFINITION_FIELDS, INSTANCE_ERROR,
                                     INSTANCE_FINISHED, INSTANCE_RUNNING, Cron, RunningInstance,
                                     storable)
from qlshadow.parse import INT32_MAX, INT32_MIN, INT64_MAX, TIME_MAX, parse_ids, to_int

STATUS_CODES = {0: 0, 1: 1, 2: 2, 3: 3, "0": 0, "1": 1, "2": 2, "3": 3}
NOT_GIVEN = object()  # the key is absent, null or "": rule 3 leaves the column alone


@dataclass(frozen=True, slots=True)
class StatusCallback:
    ids: tuple
    status: int
    pid: object
    log_path: object
    last_execution_time: object
    last_running_time: object
    exit_code: object
    execution_id: object  # the raw value; NOT_GIVEN when absent or null


def decode_json(raw: bytes):
    """Parse a request body as JSON whatever its Content-Type; InvalidInput on anything else."""
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise InvalidInput("The request body is not valid JSON.") from None


def _reject_constant(name):
    raise ValueError(name)


def _optional_int(body: dict, key: str, lo: int, hi: int):
    value = body.get(key)
    if value is None or value == "":
        return NOT_GIVEN
    if type(value) is not int or not lo <= value <= hi:
        raise InvalidInput(f"'{key}' must be an integer between {lo} and {hi} or null.")
    return value


def parse_status_callback(body) -> StatusCallback:
    """Validate a status callback body; raises InvalidInput naming the first bad field."""
    if not isinstance(body, dict):
        raise InvalidInput("The request body must be a JSON object.")
    ids = parse_ids(body.get("ids"), "ids")
    status = body.get("status")
    if status is None or type(status) not in (int, str) or status not in STATUS_CODES:
        raise InvalidInput("'status' must be 0 (running), 1 (idle), 2 (disabled) or 3 (queued).")
    pid = body.get("pid")
    if pid is None or pid in ("", "''"):
        pid = NOT_GIVEN
    else:
        pid = to_int(pid, 0, INT64_MAX)
        if pid is None:
            raise InvalidInput("'pid' must be a non-negative integer, a digit string, '' or null.")
    log_path = body.get("log_path")
    if log_path is None or log_path == "":
        log_path = NOT_GIVEN
    elif type(log_path) is not str or len(log_path) > 1024 or not storable(log_path):
        raise InvalidInput("'log_path' must be a string of at most 1024 characters "
                           "(no NUL, valid Unicode) or null.")
    execution_id = body.get("execution_id", None)
    return StatusCallback(
        ids=ids,
        status=STATUS_CODES[status],
        pid=pid,
        log_path=log_path,
        last_execution_time=_optional_int(body, "last_execution_time", 0, TIME_MAX),
        last_running_time=_optional_int(body, "last_running_time", 0, TIME_MAX),
        exit_code=_optional_int(body, "exit_code", INT32_MIN, INT32_MAX),
        execution_id=NOT_GIVEN if execution_id is None else execution_id,
    )


# The callback's statements are built from the models by Peewee once (db.Statement) and
# then only executed: building query objects on every call was most of a callback's CPU.
# Each cron costs two statements: one UPDATE that also returns the definition Shadow needs
# and the last alerted state (RETURNING: no read before the write) and one instance insert
# or close; a third and fourth only when a finish changes the alert state (events.py).
DEFINITION = (Cron.id, *(getattr(Cron, name) for name in DEFINITION_FIELDS))
DEFINITION_KEYS = tuple(field.name for field in DEFINITION)


def _update_cron(idle_with_log: bool):
    # Rule 3 in SQL: COALESCE keeps the column when the value is not given (None).
    status, pid, log_path = slot("status"), fn.COALESCE(slot("pid"), Cron.pid), slot("log_path")
    if idle_with_log:
        # Rule 2, decided on the stored row in the same statement: an idle callback for
        # another log file leaves status, pid and log_path as they are.
        stale = Cron.log_path.is_null() | (Cron.log_path != slot("log_path"))
        status = Case(None, [(stale, Cron.status)], status)
        pid = Case(None, [(stale, Cron.pid)], pid)
        log_path = Case(None, [(stale, Cron.log_path)], log_path)
    else:
        log_path = fn.COALESCE(log_path, Cron.log_path)
    return (Cron.update({
        Cron.status: status, Cron.pid: pid, Cron.log_path: log_path,
        Cron.last_execution_time: fn.COALESCE(slot("started"), Cron.last_execution_time),
        Cron.last_running_time: fn.COALESCE(slot("duration"), Cron.last_running_time)})
        .where(Cron.id == slot("id")).returning(*DEFINITION, Cron.alert_after, Cron.alert_state))


_UPDATE_CRON = Statement(lambda: _update_cron(False))
_UPDATE_CRON_IDLE_LOG = Statement(lambda: _update_cron(True))
# The running state is a literal, not a parameter: it is what makes the partial index
# running_instances_open usable without re-planning the statement on every call.
_OPEN = RunningInstance.status == SQL(str(INSTANCE_RUNNING))
_INSERT_INSTANCE = Statement(lambda: RunningInstance.insert({
    RunningInstance.cron: slot("id"), RunningInstance.pid: slot("pid"),
    RunningInstance.log_path: slot("log_path"), RunningInstance.started_at: slot("started"),
    RunningInstance.host_id: slot("host_id"),
    RunningInstance.status: SQL(str(INSTANCE_RUNNING))}).returning())
_CLOSE = {"finished_at": slot("now"), "exit_code": slot("exit_code"), "status": slot("status")}
_CLOSE_INSTANCES = Statement(lambda: RunningInstance.update(_CLOSE).where(
    (RunningInstance.cron == slot("id")) & (RunningInstance.pid == slot("pid")) & _OPEN))
_CLOSE_INSTANCES_NO_PID = Statement(lambda: RunningInstance.update(_CLOSE).where(
    (RunningInstance.cron == slot("id")) & RunningInstance.pid.is_null() & _OPEN))
# On a fleet's database each host numbers its own processes, so a finish closes only the
# instances its own host opened (and those opened before hosts were recorded).
_ON_HOST = (RunningInstance.host_id == slot("host_id")) | RunningInstance.host_id.is_null()
_CLOSE_HOST_INSTANCES = Statement(lambda: RunningInstance.update(_CLOSE).where(
    (RunningInstance.cron == slot("id")) & (RunningInstance.pid == slot("pid")) & _OPEN
    & _ON_HOST))
_CLOSE_HOST_INSTANCES_NO_PID = Statement(lambda: RunningInstance.update(_CLOSE).where(
    (RunningInstance.cron == slot("id")) & RunningInstance.pid.is_null() & _OPEN & _ON_HOST))


def apply_status_callback(cb: StatusCallback, now: int, alerted: list | None = None,
                          host_id: int | None = None) -> dict:
    """Apply rules 1-5 for every id inside the caller's transaction, and record an alert
    event where a finish changes a cron's alert state (events.py); the ids of those crons
    are appended to `alerted` when given (the in-service sender is woken for them).

    Returns {cron_id: the cron's definition as a dict} for the ids that exist (Shadow
    derives the task revision from it, so the cron is touched once per callback).
    """
    crons = {}
    idle = cb.status == CRON_IDLE
    pid = None if cb.pid is NOT_GIVEN else cb.pid
    log_path = None if cb.log_path is NOT_GIVEN else cb.log_path
    started = None if cb.last_execution_time is NOT_GIVEN else cb.last_execution_time
    duration = cb.last_running_time
    values = {
        "status": cb.status, "pid": pid, "log_path": log_path, "started": started,
        "duration": duration if duration is not NOT_GIVEN and duration > 0 else None,
    }
    update = _UPDATE_CRON_IDLE_LOG if idle and log_path is not None else _UPDATE_CRON
    if cb.status == CRON_RUNNING:  # rule 4
        instance, instance_values = _INSERT_INSTANCE, {
            "pid": pid, "log_path": log_path, "host_id": host_id,
            "started": started if started is not None and started > 0 else now}
    elif idle:  # rule 5 (whether or not rule 2 held the cron's fields back)
        exit_code = None if cb.exit_code is NOT_GIVEN else cb.exit_code
        if host_id is None:
            instance = _CLOSE_INSTANCES_NO_PID if pid is None else _CLOSE_INSTANCES
        else:
            instance = _CLOSE_HOST_INSTANCES_NO_PID if pid is None else _CLOSE_HOST_INSTANCES
        instance_values = {"now": now, "exit_code": exit_code, "pid": pid, "host_id": host_id,
                           "status": INSTANCE_ERROR if exit_code else INSTANCE_FINISHED}
    else:
        instance = None  # disabled and queued neither open nor close an instance
    finished = events.finish_state(exit_code) if idle else None
    for cron_id in cb.ids:
        values["id"] = cron_id
        row = update.execute(values).fetchone()
        if row is None:
            continue  # rule 1
        # The row ends with alert_after and the alert state, which zip leaves out of the
        # definition.
        crons[cron_id] = dict(zip(DEFINITION_KEYS, row, strict=False))
        if finished is not None and finished != (row[-1] or "ok"):
            events.record(cron_id, row[-1], finished, now, exit_code, log_path)
            if alerted is not None:
                alerted.append(cron_id)
        elif finished == "failed" and (row[-2] or 1) > 1 and alerted is not None:
            # Another failure in a row: the event held for alert_after may be due now.
            alerted.append(cron_id)
        if instance is not None:
            instance_values["id"] = cron_id
            instance.execute(instance_values)
    return crons
