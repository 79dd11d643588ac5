"""kill -9 of the server in the middle of a crond burst, restart on the same database,
replay what the clients saw unanswered: nothing answered is lost, nothing is doubled."""
from __future__ import annotations

import os
import signal

import pytest

from invariants import Inspector

from .helpers import SHADOW, Burst, make_crons, plan

pytestmark = pytest.mark.faults

CRONS, EXECUTIONS = 6, 40  # 480 callbacks at most


def test_a_killed_server_loses_no_answered_callback_and_replays_make_one_run_each(
        live_server, db_url, figures):
    server = live_server(**SHADOW)
    cron_ids = make_crons(server.url, server.headers, CRONS)
    burst = Burst(server.url, server.token, plan(cron_ids, EXECUTIONS)).start()
    # Kill once a third of the callbacks were answered: the burst is then surely mid-way.
    assert burst.wait_for(lambda b: len(b.answered) >= CRONS * EXECUTIONS * 2 // 3)
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait(30)
    burst.join()
    assert burst.pending, "the kill came after the burst ended; nothing was in flight"
    assert not burst.bad_answers

    # Before any replay: every execution answered 200 has its Run (durable), none is invented.
    with Inspector(db_url) as inspector:
        before = inspector.check(runs_within=burst.sent, runs_include=burst.answered_ids())
    unanswered_ids = {execution.eid for execution, _ in burst.pending}
    committed_unanswered = len(unanswered_ids & _stored_keys(db_url))

    restarted = live_server(**SHADOW)
    replays = burst.replay(restarted.url, restarted.token)

    last = {}
    for execution, _ in burst.pending:
        last[execution.cron_id] = execution
    expected = {cron_id: {"status": 1, "pid": e.pid, "log_path": e.log_path}
                for cron_id, e in last.items()}
    with Inspector(db_url) as inspector:
        after = inspector.check(runs_exactly=burst.sent, crons=expected, open_instances=False)
    assert after["runs_by_state"] == {"exited": len(burst.sent)}
    figures(callbacks_answered_before_kill=len(burst.answered),
            executions_sent=len(burst.sent), unanswered_at_kill=len(burst.pending),
            unanswered_but_committed=committed_unanswered, runs_after_kill=before["runs"],
            replayed_callbacks=replays, runs_after_replay=after["runs"],
            errors_seen=sorted(k for k in burst.statuses if k != 200))


def _stored_keys(db_url: str) -> set:
    with Inspector(db_url) as inspector:
        return {row["idempotency_key"] for row in inspector.rows("shadow_runs")}
