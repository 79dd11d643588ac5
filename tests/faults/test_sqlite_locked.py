"""SQLite locked by another process past the busy timeout: JSON 503, nothing written,
normal service once the lock is gone (SQLite only: PostgreSQL has row locks, no file lock)."""
from __future__ import annotations

import pytest

from helpers import http
from invariants import Inspector

from .helpers import SHADOW, Execution, SqliteLockHolder, json_error, make_crons, send_callback

pytestmark = [pytest.mark.faults, pytest.mark.parametrize("backend", ["sqlite"])]

BUSY = {**SHADOW, "QL_DB_TIMEOUT": "0.5"}


@pytest.fixture
def locked(db_url):
    """Start a lock holder on this test's SQLite file; always ended at teardown."""
    holders = []

    def lock():
        holders.append(SqliteLockHolder(db_url[len("sqlite:///"):]))
        return holders[-1]
    yield lock
    for holder in holders:
        holder.kill()


def test_a_callback_blocked_by_another_writer_is_a_json_503_that_wrote_nothing(
        live_server, db_url, locked, figures):
    server = live_server(**BUSY)
    cron_id = make_crons(server.url, server.headers, 1)[0]
    executions = [Execution(cron_id, 1_764_460_800 + n, 100 + n, f"job/{n}.log", 0) for n in range(3)]
    with Inspector(db_url) as inspector:
        before = inspector.snapshot()
        holder = locked()
        answers = [send_callback(server.url, server.token, e.body("running")) for e in executions]
        created = http("POST", server.url + "/open/crons",
                       {"name": "x", "command": "x", "schedule": "* * * * *"}, server.headers)
        during = inspector.snapshot()
        holder.release()
        assert inspector.snapshot() == before
        inspector.check(runs_exactly=set(), crons={cron_id: {"status": 1, "pid": None}})
    assert [(status, json_error(raw)) for status, raw in answers] == [
        (503, {"code": 503, "message": "The database is unavailable; try again shortly."})] * 3
    assert created[0] == 503 and created[1]["code"] == 503
    assert during == before
    figures(callbacks_refused_503=len(answers), busy_timeout_s=0.5)


def test_service_is_normal_after_the_other_writer_lets_go(live_server, db_url, locked, figures):
    server = live_server(**BUSY)
    cron_id = make_crons(server.url, server.headers, 1)[0]
    execution = Execution(cron_id, 1_764_460_800, 77, "job/1.log", 0)
    holder = locked()
    refused = send_callback(server.url, server.token, execution.body("running"))
    holder.release()
    # The client replays what was refused; then the execution finishes normally.
    replayed = send_callback(server.url, server.token, execution.body("running"))
    finished = send_callback(server.url, server.token, execution.body("idle"))
    assert [refused[0], replayed[0], finished[0]] == [503, 200, 200]
    assert http("GET", server.url + "/health")[0] == 200
    with Inspector(db_url) as inspector:
        summary = inspector.check(runs_exactly={execution.eid}, open_instances=False,
                                  crons={cron_id: {"status": 1, "pid": 77, "log_path": "job/1.log"}})
    assert summary["runs_by_state"] == {"exited": 1}
    assert "Traceback" not in server.output()
    figures(refused=1, replayed=1, runs=summary["runs"])


def test_health_still_answers_while_another_process_holds_the_write_lock(
        live_server, db_url, locked):
    server = live_server(**BUSY)
    holder = locked()
    status, body = http("GET", server.url + "/health")
    holder.release()
    assert (status, body["data"]["db"]) == (200, "ok")
    with Inspector(db_url) as inspector:
        inspector.check(runs_exactly=set())
