"""PostgreSQL restarts under load: JSON 503s during the outage, recovery without a restart.

The database lives in a private, throwaway cluster (see private_pg): restarting the
machine's shared cluster would break every other test using it.
"""
from __future__ import annotations

import time

import pytest

from helpers import http
from invariants import Inspector

from .helpers import SHADOW, Burst, Execution, json_error, make_crons, plan, send_callback

pytestmark = pytest.mark.faults


@pytest.fixture
def db_url(private_pg):
    """This module's databases live in the private cluster, whatever the backend param."""
    return private_pg.create_database()


def test_callbacks_during_a_postgresql_restart_get_json_503_and_the_service_recovers(
        live_server, private_pg, db_url, figures):
    server = live_server(**SHADOW, QL_DB_TIMEOUT="2")
    cron_ids = make_crons(server.url, server.headers, 4)
    burst = Burst(server.url, server.token, plan(cron_ids, 400), stop_on_failure=False,
                  pause=0.005).start()
    try:
        assert burst.wait_for(lambda b: len(b.answered) >= 40)
        private_pg.stop("fast")
        down_at = time.monotonic()
        assert burst.wait_for(lambda b: b.count(503) >= 20, timeout=30)
        private_pg.start()
        refused_while_down = burst.count(503)
        up_at = time.monotonic()
        answered_at_start = len(burst.answered)
        assert burst.wait_for(lambda b: len(b.answered) > answered_at_start, timeout=30)
        recovered_at = time.monotonic()
        assert burst.wait_for(lambda b: len(b.answered) >= answered_at_start + 40, timeout=30)
    finally:
        burst.halt.set()
        burst.join()

    assert set(burst.statuses) <= {200, 503}, burst.statuses
    assert not burst.bad_answers
    assert server.process.poll() is None
    assert http("GET", server.url + "/health")[0] == 200
    assert "Traceback" not in server.output()
    with Inspector(db_url) as inspector:
        inspector.check(runs_within=burst.sent, runs_include=burst.answered_ids())
    replays = burst.replay(server.url, server.token)
    with Inspector(db_url) as inspector:
        summary = inspector.check(runs_exactly=burst.sent, open_instances=False,
                                  crons={cron_id: {"status": 1} for cron_id in cron_ids})
    figures(callbacks_answered=len(burst.answered), answers_503=burst.count(503),
            answers_503_until_started=refused_while_down, outage_seconds=round(up_at - down_at, 2),
            recovery_seconds_after_start=round(recovered_at - up_at, 3),
            replayed_callbacks=replays, runs=summary["runs"], executions_sent=len(burst.sent))


def test_the_first_callback_after_a_quiet_postgresql_restart_is_answered(
        live_server, private_pg, db_url, figures):
    # One worker thread: its connection was opened before the restart and not used since.
    server = live_server(**SHADOW, QL_THREADS="1")
    cron_id = make_crons(server.url, server.headers, 1)[0]
    first, second = plan([cron_id], 2)[cron_id]
    assert send_callback(server.url, server.token, first.body("running"))[0] == 200
    private_pg.stop("fast")
    private_pg.start()
    status, raw = send_callback(server.url, server.token, first.body("idle"))
    assert (status, raw) == (200, b'{"code":200}\n')
    with Inspector(db_url) as inspector:
        inspector.check(runs_exactly={first.eid}, crons={cron_id: {"status": 1}},
                        open_instances=False)


def test_a_callback_while_postgresql_is_down_is_a_json_503_that_wrote_nothing(
        live_server, private_pg, db_url):
    server = live_server(**SHADOW)
    cron_id = make_crons(server.url, server.headers, 1)[0]
    execution = Execution(cron_id, 1_764_460_800, 42, "job/1.log", 0)
    private_pg.stop("fast")
    try:
        status, raw = send_callback(server.url, server.token, execution.body("running"))
        health = http("GET", server.url + "/health")
    finally:
        private_pg.start()
    assert status == 503 and json_error(raw) == {
        "code": 503, "message": "The database is unavailable; try again shortly."}
    assert health[0] == 503 and health[1]["data"]["db"] == "unavailable"
    with Inspector(db_url) as inspector:
        inspector.check(runs_exactly=set(), crons={cron_id: {"status": 1, "pid": None}})
