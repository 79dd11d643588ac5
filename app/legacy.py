"""The 2.x status callback: parse its body strictly, apply rules 1-5 (docs/CONTRACT.md).

Unknown keys are ignored on purpose: in 2.x one strictly validated new field made every
status update fail and left tasks stuck "running"; a newer client must never break us.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from .db import prebuilt
from .errors import InvalidInput
from .models import (CRON_IDLE, CRON_RUNNING, INSTANCE_ERROR, INSTANCE_FINISHED,
                     INSTANCE_RUNNING, Cron, database, storable)
from .parse import INT32_MAX, INT32_MIN, INT64_MAX, to_int

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
    raw_ids = body.get("ids")
    if not isinstance(raw_ids, list) or not raw_ids:
        raise InvalidInput("'ids' must be a non-empty list of cron ids.")
    ids = []
    for raw in raw_ids:
        cron_id = to_int(raw, 1, INT64_MAX)
        if cron_id is None:
            raise InvalidInput("'ids' must hold only positive integer cron ids.")
        if cron_id not in ids:
            ids.append(cron_id)
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
        ids=tuple(ids),
        status=STATUS_CODES[status],
        pid=pid,
        log_path=log_path,
        last_execution_time=_optional_int(body, "last_execution_time", 0, INT64_MAX),
        last_running_time=_optional_int(body, "last_running_time", 0, INT64_MAX),
        exit_code=_optional_int(body, "exit_code", INT32_MIN, INT32_MAX),
        execution_id=NOT_GIVEN if execution_id is None else execution_id,
    )


# The callback runs the same few statements every time: they are written out once here
# instead of being built by Peewee's query objects on every call (that building was most of
# a callback's CPU time). '?' becomes the driver's placeholder in db.prebuilt().
_CRON_COLUMNS = tuple(field.column_name for field in Cron._meta.sorted_fields)
_SELECT_CRON = ("SELECT " + ", ".join(f'"{c}"' for c in _CRON_COLUMNS)
                + ' FROM "crons" WHERE "id" = ?')
_cron_updates: dict = {}  # tuple of column names -> UPDATE statement
_INSERT_INSTANCE = ('INSERT INTO "running_instances" ("cron_id", "pid", "log_path", "started_at", '
                    f'"status") VALUES (?, ?, ?, ?, {INSTANCE_RUNNING})')
# The running state is a literal, not a parameter: it is what makes the partial index
# running_instances_open usable without re-planning the statement on every call.
_CLOSE_INSTANCES = ('UPDATE "running_instances" SET "finished_at" = ?, "exit_code" = ?, "status" = ? '
                    f'WHERE "cron_id" = ? AND "pid" = ? AND "status" = {INSTANCE_RUNNING}')
_CLOSE_INSTANCES_NO_PID = ('UPDATE "running_instances" SET "finished_at" = ?, "exit_code" = ?, '
                           '"status" = ? WHERE "cron_id" = ? AND "pid" IS NULL '
                           f'AND "status" = {INSTANCE_RUNNING}')


def _update_cron_sql(columns: tuple) -> str:
    sql = _cron_updates.get(columns)
    if sql is None:
        sql = _cron_updates[columns] = (
            'UPDATE "crons" SET ' + ", ".join(f'"{c}" = ?' for c in columns) + ' WHERE "id" = ?')
    return sql


def apply_status_callback(cb: StatusCallback, now: int) -> dict:
    """Apply rules 1-5 for every id inside the caller's transaction.

    Returns {cron_id: cron row as a dict} for the ids that exist (Shadow reads the
    definition from it, so the cron is read once per callback).
    """
    execute = database.obj.execute_sql
    crons = {}
    for cron_id in cb.ids:
        row = execute(prebuilt(_SELECT_CRON), (cron_id,)).fetchone()
        if row is None:
            continue  # rule 1
        cron = crons[cron_id] = dict(zip(_CRON_COLUMNS, row))
        idle = cb.status == CRON_IDLE
        # rule 2: a late finish of an older run (another log file) must not mark the newer
        # run idle; duration and start time still apply (rule 3), and rule 5 still closes.
        stale = idle and cb.log_path is not NOT_GIVEN and cb.log_path != cron["log_path"]
        columns, values = [], []
        if not stale:
            columns.append("status")
            values.append(cb.status)
            if cb.pid is not NOT_GIVEN:
                columns.append("pid")
                values.append(cb.pid)
            if cb.log_path is not NOT_GIVEN:
                columns.append("log_path")
                values.append(cb.log_path)
        if cb.last_execution_time is not NOT_GIVEN:
            columns.append("last_execution_time")
            values.append(cb.last_execution_time)
        if cb.last_running_time is not NOT_GIVEN and cb.last_running_time > 0:
            columns.append("last_running_time")
            values.append(cb.last_running_time)
        if columns:
            values.append(cron_id)
            execute(prebuilt(_update_cron_sql(tuple(columns))), values)

        pid = None if cb.pid is NOT_GIVEN else cb.pid
        if cb.status == CRON_RUNNING:  # rule 4
            started = cb.last_execution_time
            execute(prebuilt(_INSERT_INSTANCE), (
                cron_id, pid, None if cb.log_path is NOT_GIVEN else cb.log_path,
                started if started is not NOT_GIVEN and started > 0 else now))
        elif idle:  # rule 5
            exit_code = None if cb.exit_code is NOT_GIVEN else cb.exit_code
            status = INSTANCE_ERROR if exit_code else INSTANCE_FINISHED
            if pid is None:
                execute(prebuilt(_CLOSE_INSTANCES_NO_PID), (now, exit_code, status, cron_id))
            else:
                execute(prebuilt(_CLOSE_INSTANCES), (now, exit_code, status, cron_id, pid))
    return crons
