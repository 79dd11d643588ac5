"""The same callback at the same instant (CONTRACT.md §3.10), through real waitress servers.

16 client threads are released together by a barrier, against one server or split over two
server processes that share one PostgreSQL database or one SQLite file. The database's
unique key, not a lock in one process, must leave exactly one Run per execution.
"""
from __future__ import annotations

import threading
from operator import itemgetter

import pytest

from qlshadow.storage import db
from qlshadow.storage.models import ShadowRun
from qlshadow.core.shadow.reader import logical_row
from helpers import SHADOW_ON, http

THREADS = 16
ROUNDS = 3  # three executions, raced one after the other
CRON = {"name": "backup", "command": "task backup.sh", "schedule": "*/5 * * * *"}


def execution_id(n: int) -> str:
    return f"legacy-system:{1764460800 + n}:{n:08x}-9d4a-4e6b-8f1a-2c3d4e5f6a7b"


def callback(cron_id: int, eid: str, status: int) -> dict:
    if status == 0:
        return {"ids": [cron_id], "status": 0, "pid": 4242, "log_path": "backup/1.log",
                "last_execution_time": 1764460800, "execution_id": eid}
    # The finish names a log the cron does not hold (rule 2) and carries no times, so Legacy
    # leaves the cron row alone: on PostgreSQL no row lock lines the requests up, and the
    # Shadow inserts really race each other.
    return {"ids": [cron_id], "status": 1, "pid": 4242, "log_path": "backup/old.log",
            "exit_code": 0, "execution_id": eid}


def race(requests: list) -> list:
    """Send (url, headers, body) requests from one thread each, all released at once."""
    barrier = threading.Barrier(len(requests))
    answers = [None] * len(requests)

    def send(i, url, headers, body):
        barrier.wait()
        answers[i] = http("PUT", url + "/open/crons/status", body, headers)

    threads = [threading.Thread(target=send, args=(i, *r)) for i, r in enumerate(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return answers


@pytest.fixture
def stored_runs(make_settings):
    """Reads shadow_runs straight from the servers' shared database."""
    database = db.make_database(make_settings().db_url)

    def read() -> list:
        db.bind(database)
        with database.connection_context():
            return sorted(map(logical_row, ShadowRun.select().dicts()),
                          key=itemgetter("idempotency_key"))

    yield read
    database.close()


def start_servers(live_server, count: int) -> list:
    servers = [live_server(QL_THREADS="8", **SHADOW_ON) for _ in range(count)]
    status, body = http("POST", servers[0].url + "/open/crons", CRON, servers[0].headers)
    assert status == 200, body
    return servers


def run_rounds(servers: list, statuses) -> list:
    """For each round, THREADS callbacks of one execution with the given statuses in turn."""
    listed = http("GET", servers[0].url + "/open/crons", None, servers[0].headers)[1]
    cron_id = listed["data"]["data"][0]["id"]
    answers = []
    for n in range(ROUNDS):
        requests = [(servers[i % len(servers)].url, servers[i % len(servers)].headers,
                     callback(cron_id, execution_id(n), statuses[i % len(statuses)]))
                    for i in range(THREADS)]
        answers += race(requests)
    return answers


def kinds(row: dict) -> list:
    return [item.split("@")[0] for item in row["events"].split()]


def assert_one_closed_run_per_execution(rows: list, servers: list, allowed: tuple):
    assert [r["idempotency_key"] for r in rows] == sorted(execution_id(n) for n in range(ROUNDS))
    assert len({r["id"] for r in rows}) == len({r["attempt_id"] for r in rows}) == ROUNDS
    for row in rows:
        assert row["state"] == "exited"
        assert kinds(row) in allowed
    listed = http("GET", servers[-1].url + "/open/runs", None, servers[-1].headers)[1]["data"]
    assert sorted((r["id"], r["attempt"]["id"], len(r["events"])) for r in listed) == sorted(
        (r["id"], r["attempt_id"], len(kinds(r))) for r in rows)
    # the unique key resolved every race: no request fell back to a writer_error
    assert http("GET", servers[0].url + "/open/runs/failures", None,
                servers[0].headers)[1]["data"] == []


FINISH_ONLY = (["accepted", "spawned", "exited"],)
ANY_ORDER = (["accepted", "spawned", "exited"], ["accepted", "spawned", "running", "exited"])


def test_sixteen_threads_sending_one_finish_leave_one_run(live_server, stored_runs):
    servers = start_servers(live_server, 1)
    answers = run_rounds(servers, [1])
    assert answers == [(200, {"code": 200})] * THREADS * ROUNDS
    assert_one_closed_run_per_execution(stored_runs(), servers, FINISH_ONLY)


def test_sixteen_threads_mixing_start_and_finish_leave_one_run(live_server, stored_runs):
    servers = start_servers(live_server, 1)
    answers = run_rounds(servers, [0, 1])
    assert answers == [(200, {"code": 200})] * THREADS * ROUNDS
    assert_one_closed_run_per_execution(stored_runs(), servers, ANY_ORDER)


def test_two_server_processes_sharing_one_database_leave_one_run(live_server, stored_runs):
    servers = start_servers(live_server, 2)
    answers = run_rounds(servers, [1])
    assert answers == [(200, {"code": 200})] * THREADS * ROUNDS
    assert_one_closed_run_per_execution(stored_runs(), servers, FINISH_ONLY)


def test_two_server_processes_mixing_start_and_finish_leave_one_run(live_server, stored_runs):
    servers = start_servers(live_server, 2)
    answers = run_rounds(servers, [0, 0, 1, 1])  # each server gets starts and finishes
    assert answers == [(200, {"code": 200})] * THREADS * ROUNDS
    assert_one_closed_run_per_execution(stored_runs(), servers, ANY_ORDER)
