"""Manual runs: PUT /open/crons/run and `qlshadow cron run` start task.sh detached, unmarked."""
from __future__ import annotations

import json

import pytest

from helpers import BACKENDS, http, run_cli
from shellenv import instances_of, runs_of, start_module_server, wait_for


@pytest.fixture(scope="module", params=BACKENDS)
def server(request, tmp_path_factory):
    """One server per backend for the module: each test makes and runs its own cron."""
    # Shadow on, and a marker in the server's own environment: a manual run must still
    # never carry it.
    srv, cleanup = start_module_server(tmp_path_factory, request.param,
                                       QL3_SHADOW_ORIGINS="scheduled_system",
                                       QL_EXECUTION_ORIGIN="scheduled_system")
    yield srv
    cleanup()


def add_cron(server, command: str) -> int:
    status, body = http("POST", f"{server.url}/open/crons",
                        {"name": "manual job", "command": command, "schedule": "0 4 * * *"},
                        server.headers)
    assert status == 200, body
    return body["data"]["id"]


def finished(server, cron_id: int):
    instances = instances_of(server, cron_id)
    return instances if instances and instances[0]["finished_at"] is not None else None


def run_now(server, cron_id: int):
    return http("PUT", f"{server.url}/open/crons/run", [cron_id], server.headers)


def test_a_manual_run_ends_as_a_finished_legacy_instance_with_its_exit_code(server):
    cron_id = add_cron(server, "echo manual; exit 4")
    assert run_now(server, cron_id) == (200, {"code": 200, "data": [cron_id]})
    instances = wait_for(lambda: finished(server, cron_id))
    assert len(instances) == 1
    assert (instances[0]["exit_code"], instances[0]["status"]) == (4, 3)


def test_a_manual_run_never_becomes_a_shadow_run(server):
    cron_id = add_cron(server, "exit 0")
    run_now(server, cron_id)
    assert wait_for(lambda: finished(server, cron_id))
    assert runs_of(server, cron_id) == []
    status, failures = http("GET", f"{server.url}/open/runs/failures", headers=server.headers)
    # Shared by the module's tests, none of which may leave a failure.
    assert failures["data"] == []


def test_the_runner_environment_has_no_marker(server, tmp_path):
    seen = tmp_path / "env.txt"
    cron_id = add_cron(server, f"env > {seen}")
    run_now(server, cron_id)
    assert wait_for(lambda: finished(server, cron_id))
    text = seen.read_text()
    assert f"ID={cron_id}\n" in text
    assert "QL_EXECUTION_ORIGIN" not in text


def test_the_answer_comes_while_the_task_still_runs(server, tmp_path):
    go = tmp_path / "go"
    cron_id = add_cron(server, f"while [ ! -e {go} ]; do sleep 0.1; done")
    assert run_now(server, cron_id)[0] == 200
    running = wait_for(lambda: instances_of(server, cron_id))
    assert running[0]["finished_at"] is None
    go.write_text("")
    assert wait_for(lambda: finished(server, cron_id))


def test_a_manual_run_of_an_unknown_cron_is_404_and_starts_nothing(server):
    cron_id = add_cron(server, "exit 0")
    status, body = http("PUT", f"{server.url}/open/crons/run", [cron_id, 999999], server.headers)
    assert status == 404 and "999999" in body["message"]
    assert instances_of(server, cron_id) == []


def test_qlshadow_cron_run_starts_a_detached_manual_run(server):
    cron_id = add_cron(server, "echo from the task; exit 7")
    env = {"QL_DATA_DIR": server.data_dir, "QL_DB_URL": server.db_url,
           "QL_SCHEDULER": "node", "QL_PORT": str(server.live.port)}
    result = run_cli(env, "cron", "run", str(cron_id))
    assert result.stdout == (f"started cron {cron_id} (manual job) as a manual run; "
                             f"its log: qlshadow log --cron {cron_id} -f\n")
    instances = wait_for(lambda: finished(server, cron_id))
    assert instances[0]["exit_code"] == 7
    assert runs_of(server, cron_id) == []
    # The command it names shows the task's output; with Shadow off, `runs --failed`
    # lists the failed Legacy instance (a manual run is never a Shadow Run).
    assert run_cli(env, "log", "--cron", str(cron_id)).stdout.splitlines()[-1] == "from the task"
    failed = run_cli(env, "runs", "--failed").stdout.splitlines()
    assert failed[0].split()[:2] == ["instance", "cron"]
    assert failed[1].split()[:4] == [str(instances[0]["id"]), str(cron_id), "manual", "job"]
    assert failed[1].split()[-3:-1] == ["failed", "7"]

    assert json.loads(run_cli(env, "cron", "run", str(cron_id), "--json").stdout) == [cron_id]
    wait_for(lambda: len(instances_of(server, cron_id)) == 2 and finished(server, cron_id))
