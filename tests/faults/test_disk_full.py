"""The SQLite database on a small tmpfs that fills up: JSON 503, the file stays intact,
service resumes when space returns. SQLite only: a PostgreSQL server's disk is the
database administrator's (see docs/RELIABILITY.md)."""
from __future__ import annotations

import os

import pytest

from conftest import http
from invariants import Inspector

from .conftest import SHADOW, fill_disk, json_error, make_crons, plan, send_callback

pytestmark = [pytest.mark.faults, pytest.mark.parametrize("backend", ["sqlite"])]


def test_a_full_disk_gives_json_503_keeps_the_database_intact_and_recovers(
        small_tmpfs, live_server, figures):
    db_url = f"sqlite:///{small_tmpfs}/qlshadow.db"
    server = live_server(**SHADOW, QL_DB_URL=db_url)
    cron_id = make_crons(server.url, server.headers, 1)[0]
    executions = plan([cron_id], 400)[cron_id]
    for execution in executions[:3]:
        for kind in ("running", "idle"):
            assert send_callback(server.url, server.token, execution.body(kind))[0] == 200
    with Inspector(db_url) as inspector:
        # An empty WAL must grow with the next write, so the first commit meets the full disk.
        inspector.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    filler, filled = fill_disk(small_tmpfs)

    answered, refused = list(executions[:3]), []
    for execution in executions[3:]:  # bounded: stops at the first refusal
        status, raw = send_callback(server.url, server.token, execution.body("running"))
        if status != 200:
            refused.append((execution, status, raw))
            break
        answered.append(execution)
    assert refused, "the disk never filled up"
    execution, status, raw = refused[0]
    assert (status, json_error(raw)) == (
        503, {"code": 503, "message": "The database is unavailable; try again shortly."})
    again = send_callback(server.url, server.token, execution.body("running"))
    assert again[0] == 503
    with Inspector(db_url) as inspector:
        full = inspector.check(runs_within={e.eid for e in answered},
                               runs_include={e.eid for e in answered})
    assert full["integrity"] == "ok"

    os.unlink(filler)
    status, _ = send_callback(server.url, server.token, execution.body("running"))
    assert status == 200
    for e in answered[3:] + [execution]:
        assert send_callback(server.url, server.token, e.body("idle"))[0] == 200
    assert http("GET", server.url + "/health")[0] == 200
    assert "Traceback" not in server.output()
    with Inspector(db_url) as inspector:
        after = inspector.check(runs_exactly={e.eid for e in answered + [execution]},
                                open_instances=False,
                                crons={cron_id: {"status": 1, "pid": execution.pid}})
    figures(tmpfs_bytes=4 * 1024 * 1024, filler_bytes=filled,
            callbacks_answered_on_full_disk=len(answered) - 3, answers_503=2,
            integrity=full["integrity"], runs_after_recovery=after["runs"])
