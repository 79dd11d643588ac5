"""Synthetic crond histories for the reconciliation tests, sent through the callback API."""
from __future__ import annotations

import os
import time
import uuid
from contextlib import contextmanager

from qlshadow.storage import db
from qlshadow.storage.models import Cron
from helpers import STATUS_PATH

HOUR = 3600
DEFECT_FIELDS = ("finish_only", "stuck", "finish_lost", "missed", "double", "unmatched_instances", "drift",
                 "invalid")


@contextmanager
def local_zone(name: str):
    """The process's local time zone (what crond and the gate see) set to name for a block."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def away_from_the_minutes_end(margin: float = 15) -> int:
    """Now, at least `margin` seconds before the minute ends (waiting into the next minute
    when it is nearer): for a history whose firing of this minute has no run, read by code
    that takes the real clock (the page, the CLI) and would judge that firing once the
    minute has ended."""
    if time.time() % 60 > 60 - margin:
        time.sleep(60 - time.time() % 60 + 0.1)
    return int(time.time())


def new_cron(client, auth, schedule: str, created_at: int, name: str = "job") -> int:
    """A cron made through the API, dated as if it had been created at created_at."""
    response = client.post("/open/crons", json={"name": name, "command": f"run {name}",
                                                "schedule": schedule}, headers=auth)
    assert response.status_code == 200, response.get_json()
    cron_id = response.get_json()["data"]["id"]
    with db.connected(), db.write_transaction():
        Cron.update(created_at=created_at, updated_at=created_at).where(Cron.id == cron_id).execute()
    return cron_id


def execution_id(at: int) -> str:
    return f"legacy-system:{at}:{uuid.uuid4()}"


def callback(client, auth, cron_id: int, status: int, at: int, pid: int, eid=None,
             exit_code: int = 0) -> None:
    body = {"ids": [cron_id], "status": status, "pid": pid,
            "log_path": f"job/{at}-{pid}.log", "last_execution_time": at}
    if status == 1:
        body.update(last_running_time=2, exit_code=exit_code)
    if eid is not None:
        body["execution_id"] = eid
    response = client.put(STATUS_PATH, json=body, headers=auth)
    assert response.status_code == 200, response.data


def fire(client, auth, cron_id: int, at: int, pid: int | None = None, start: bool = True,
         finish: bool = True, exit_code: int = 0, delay: int = 1) -> str:
    """One crond execution of cron_id at minute `at`: task.sh's running and idle callbacks."""
    began = at + delay
    pid = pid or 1000 + (at // 60) % 30000
    eid = execution_id(began)
    if start:
        callback(client, auth, cron_id, 0, began, pid, eid)
    if finish:
        callback(client, auth, cron_id, 1, began, pid, eid, exit_code)
        took(cron_id, began, 2)
    return eid


def took(cron_id: int, began: int, seconds: int) -> None:
    """Date the finish of the execution that began at `began`: the callback stamps it with
    the server's clock, which would make every run of a dated history last until today
    (and BusyBox crond skip every firing in between)."""
    from qlshadow.storage.models import RunningInstance, ShadowRun
    with db.connected(), db.write_transaction():
        RunningInstance.update(finished_at=began + seconds).where(
            RunningInstance.cron == cron_id, RunningInstance.started_at == began).execute()
        ShadowRun.update(finished_at=began + seconds).where(
            ShadowRun.cron_id == cron_id, ShadowRun.accepted_at == began,
            ShadowRun.finished_at.is_null(False)).execute()


def history(client, auth, cron_id: int, times, skip=()) -> None:
    """A clean execution at every time in times except those in skip."""
    for at in times:
        if at not in skip:
            fire(client, auth, cron_id, at)


def defects(report: dict) -> dict:
    """The defect fields that are not empty or zero."""
    return {key: report[key] for key in DEFECT_FIELDS if report[key]}


def report_of(cron_id: int, since: int, until: int, now: int, **options) -> dict:
    from qlshadow.watch.reconcile import reconcile
    with db.connected():
        data = reconcile(since, until, cron_id, now=now, **options)
    (cron,) = data["crons"]
    return cron
