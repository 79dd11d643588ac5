"""The SQLite database on a small tmpfs that fills up: JSON 503, the file stays intact,
service resumes when space returns. SQLite only: a PostgreSQL server's disk is the
database administrator's (see docs/RELIABILITY.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT, Serve, http
from invariants import Inspector

from .helpers import SHADOW, db_init, fill_disk, json_error, make_crons, plan, send_callback

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


# --- a 2 MB data partition, driven to full by task logs --------------------------------------

class Service(Serve):
    """`qlshadow serve` over a data dir, its output kept off the full partition; start()
    after stop() starts it again, appending to the same log."""

    def __init__(self, env: dict, log_path: str):
        super().__init__(env=env, log_path=log_path)

    def output(self) -> str:
        """The output of every start so far."""
        with open(self.log_path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")


def fill_with_task_logs(folder: str) -> int:
    """Old task logs (as task.sh names them) until the partition is full; returns how many."""
    os.makedirs(folder, exist_ok=True)
    chunk, count = b"log line\n" * 7282, 0
    while True:
        path = os.path.join(folder, f"2020-01-01-00-{count // 60:02d}-{count % 60:02d}-1.log")
        with open(path, "wb", buffering=0) as fh:
            try:
                fh.write(chunk)
            except OSError:
                for size in (4096, 512, 1):  # the last partial block too
                    while True:
                        try:
                            fh.write(chunk[:size])
                        except OSError:
                            break
                return count + 1
        count += 1


@pytest.mark.parametrize("restart", [False, True], ids=["running", "restarted"])
def test_a_full_data_partition_gives_503_then_prune_recovers_without_a_restart(
        tmpfs_2m, tmp_path, make_settings, restart, figures):
    db_url = f"sqlite:///{tmpfs_2m}/qlshadow.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
    env.update({"QL_DATA_DIR": tmpfs_2m, "QL_DB_URL": db_url, "QL_HOST": "127.0.0.1",
                "QL_PORT": "0", "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": "",
                "QL_CRONTAB_FILE": str(tmp_path / "crontab.list"),
                "QL_RETENTION_LOGS_PER_CRON": "2", **SHADOW})
    subprocess.run([sys.executable, "-m", "qlshadow.cli", "token", "system"], env=env, cwd=ROOT,
                   check=True, capture_output=True, timeout=60)
    with open(os.path.join(tmpfs_2m, "token.json")) as fh:
        token = json.load(fh)["value"]
    headers = {"Authorization": f"Bearer {token}"}
    service = Service(env, str(tmp_path / "server.log")).start()
    try:
        cron_id = make_crons(service.url, headers, 1)[0]
        executions = plan([cron_id], 2000)[cron_id]
        for execution in executions[:3]:
            for kind in ("running", "idle"):
                assert send_callback(service.url, token, execution.body(kind))[0] == 200
        with Inspector(db_url) as inspector:
            inspector.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the WAL must grow
        logs = fill_with_task_logs(os.path.join(tmpfs_2m, "log", "job0"))

        answered, refused = list(executions[:3]), None
        for execution in executions[3:]:
            status, raw = send_callback(service.url, token, execution.body("running"))
            if status != 200:
                refused = (execution, status, raw)
                break
            answered.append(execution)
        assert refused is not None, "the partition never filled up"
        execution, status, raw = refused
        assert (status, json_error(raw)) == (
            503, {"code": 503, "message": "The database is unavailable; try again shortly."})
        if restart:
            service.stop()
            service.start()
        assert send_callback(service.url, token, execution.body("running"))[0] == 503
        status, health = http("GET", service.url + "/health")
        assert (status, health["message"]) == (503, "Writes are failing: disk full.")
        assert health["data"]["last_write"]["cause"] == "disk full"
        with Inspector(db_url) as inspector:
            assert inspector.integrity() == "ok"

        pruned = subprocess.run([sys.executable, "-m", "qlshadow.cli", "prune"], env=env,
                                cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert pruned.returncode == 0, pruned.stderr
        # All are older than QL_RETENTION_LOG_DAYS (7): only the newest is kept.
        assert json.loads(pruned.stdout)["log_files"] == logs - 1

        assert send_callback(service.url, token, execution.body("running"))[0] == 200
        for e in answered[3:] + [execution]:
            assert send_callback(service.url, token, e.body("idle"))[0] == 200
        status, health = http("GET", service.url + "/health")
        assert (status, health["data"]["last_write"]["ok"]) == (200, True)
    finally:
        service.stop()
    output = service.output()
    assert output.count("writes are failing: disk full") == (2 if restart else 1)
    assert "cannot rollback" not in output and "Traceback" not in output
    with Inspector(db_url) as inspector:
        after = inspector.check(runs_exactly={e.eid for e in answered + [execution]},
                                open_instances=False,
                                crons={cron_id: {"status": 1, "pid": execution.pid}})
    assert after["integrity"] == "ok"
    figures(tmpfs_bytes=2 * 1024 * 1024, task_logs_filling=logs, restart=restart,
            callbacks_answered_on_full_disk=len(answered) - 3, runs_after_recovery=after["runs"],
            health_storage=health["data"]["storage"])


def test_a_rekey_on_a_full_partition_changes_nothing_and_runs_once_there_is_room(
        small_tmpfs, tmp_path, backend, figures):
    # A database of the release that keyed Runs by (project_id, idempotency_key), on a
    # partition with no room left for the copy that re-keying it needs.
    from qlshadow.storage import db
    from qlshadow.storage.models import Cron
    from old_schema import RequestKeyedRun, old_run, request_keyed_database
    db_url = f"sqlite:///{small_tmpfs}/qlshadow.db"
    database = request_keyed_database(db_url)
    with database.connection_context():
        cron = Cron.insert(name="backup", command="task backup.sh", schedule="* * * * *",
                           created_at=1, updated_at=2).execute()
        rows = [old_run(cron, 1764460800 + 60 * n, n, "exited") for n in range(800)]
        with database.atomic():
            for at in range(0, len(rows), 200):
                RequestKeyedRun.insert_many(rows[at:at + 200]).execute()
        database.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")  # the re-key must grow it
    db.discard_connection()
    env = {"QL_DATA_DIR": small_tmpfs, "QL_DB_URL": db_url, "QL_SCHEDULER": "node",
           "QL_CRONTAB_INSTALL": "", "QL_CRONTAB_FILE": str(tmp_path / "crontab.list")}
    filler, filled = fill_disk(small_tmpfs)
    # Room to open the database (its -shm file, the WAL's first pages), none for the copy.
    os.truncate(filler, filled - 256 * 1024)

    full = db_init(env, timeout=60)
    assert full.returncode == 1
    assert full.stderr.strip().endswith(
        "cannot re-key shadow_runs by (accepted_at, id): disk full; the database is unchanged")
    assert "Traceback" not in full.stderr
    with Inspector(db_url) as inspector:
        assert inspector.integrity() == "ok"
        before = inspector.rows("shadow_runs")
        assert len(before) == len(rows)
        assert _run_key(inspector) == ["project_id", "idempotency_key"]
        assert "shadow_runs_accepted" in {r[1] for r in inspector.conn.execute(
            "PRAGMA index_list(shadow_runs)")}

    os.unlink(filler)
    room = db_init(env, timeout=60)
    assert room.returncode == 0, room.stderr
    assert f"re-keyed by (accepted_at, id), {len(rows)} Runs kept" in room.stderr
    with Inspector(db_url) as inspector:
        assert inspector.integrity() == "ok"
        assert inspector.rows("shadow_runs") == before
        assert _run_key(inspector) == ["accepted_at", "id"]
    figures(tmpfs_bytes=4 * 1024 * 1024, runs=len(rows),
            db_bytes=os.path.getsize(f"{small_tmpfs}/qlshadow.db"))



def _run_key(inspector) -> list:
    """The columns of shadow_runs' primary key, in key order."""
    info = inspector.conn.execute("PRAGMA table_info(shadow_runs)").fetchall()
    return [name for _, name in sorted((row[5], row[1]) for row in info if row[5])]
