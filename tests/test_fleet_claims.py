"""Once per firing across hosts: a `one` cron's firing goes to the first host that claims it
(core/fleet.py), decided by the database's key; task.sh claims before it runs anything."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from helpers import cli_env, http, run_cli
from qlshadow.core import fleet
from qlshadow.storage import db
from qlshadow.storage.models import Claim, Cron
from qlshadow.web.views import create_app
from shellenv import (SHELLS, ToolDir, instances_of, read_logs, run_task, runs_of,
                      start_module_server, task_env)

T = 1_767_225_600  # a firing of every schedule below: 2026-01-01 00:00 UTC, a Thursday


# --- the firing a claim names ---------------------------------------------------------------

@pytest.mark.parametrize("skew", [-40, -3, 0, 3, 40])
def test_hosts_whose_clocks_differ_by_40_s_name_the_same_firing(utc_box, skew):
    assert fleet.nearest_firing("*/5 * * * *", T + skew) == T


@pytest.mark.parametrize("late", [0, 1, 5, 29])
def test_each_host_starting_its_own_minute_names_that_minute(utc_box, late):
    # Each host's crond starts the firing at that host's own minute: by its own clock the
    # claim is a few seconds after the firing, whatever the other hosts' clocks say.
    assert fleet.nearest_firing("* * * * *", T + late) == T


def test_the_nearest_firing_is_taken_either_side(utc_box):
    assert fleet.nearest_firing("0 * * * *", T + 1799) == T
    assert fleet.nearest_firing("0 * * * *", T - 1799) == T
    assert fleet.nearest_firing("0 * * * *", T + 1801) == T + 3600


def test_a_schedule_crond_does_not_run_has_no_firing():
    assert fleet.nearest_firing("*/10 * * * * *", T) is None
    assert fleet.nearest_firing("@boot", T) is None


# --- contention: the database decides -------------------------------------------------------

CLAIMER = """
import json, sys, os, time
from qlshadow import config
from qlshadow.core import fleet
from qlshadow.storage import db
settings = config.load()
database, _ = db.open_database(settings, create=False)
cron_id, at, go = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
while not os.path.exists(go):
    time.sleep(0.001)
out = []
with database.connection_context():
    for _ in range(50):
        out.append(fleet.claim(cron_id, settings.host_name, at))
print(json.dumps(out))
"""


def test_three_processes_making_50_claims_each_for_one_firing_have_one_winner(
        make_settings, tmp_path, utc_box):
    settings = make_settings(QL_HOST_NAME="router")
    create_app(settings)
    with db.database.connection_context(), db.write_transaction():
        cron_id = Cron.insert(name="b", command="true", schedule="*/5 * * * *", hosts='["*"]',
                              hosts_mode="one", created_at=1, updated_at=1).execute()
    db.discard_connection()
    script = tmp_path / "claimer.py"
    script.write_text(CLAIMER)
    go = tmp_path / "go"
    children = []
    for i, skew in enumerate((-40, 0, 40)):
        env = {**cli_env(settings), "QL_HOST_NAME": f"host{i}", "TZ": "UTC",
               "QL_DATA_DIR": str(tmp_path / f"data{i}"), "PATH": os.environ["PATH"]}
        children.append(subprocess.Popen(
            [sys.executable, str(script), str(cron_id), str(T + skew), str(go)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    time.sleep(1.5)  # all three started and connected: then they race
    go.write_text("")
    results = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        results += json.loads(out)
    assert len(results) == 150
    assert sum(r["won"] for r in results) == 1
    assert {r["firing"] for r in results} == {T}
    assert len({r["host"] for r in results}) == 1
    with db.database.connection_context():
        assert Claim.select().count() == 1


# --- the claim endpoint ---------------------------------------------------------------------

def test_the_first_host_to_claim_runs_the_firing_and_the_next_hears_409(
        make_settings, client, auth, make_cron, settings, utc_box):
    cron = make_cron(schedule="*/5 * * * *", hosts=["*"], hosts_mode="one")
    other = create_app(make_settings(QL_HOST_NAME="elsewhere"))
    first = client.post(f"/open/crons/{cron['id']}/claim", json={"at": T + 2}, headers=auth)
    second = other.test_client().post(f"/open/crons/{cron['id']}/claim", json={"at": T - 30},
                                      headers=auth)
    db.discard_connection()
    assert first.status_code == 200
    assert first.get_json()["data"] == {"won": True, "firing": T, "host": settings.host_name}
    assert second.status_code == 409
    assert second.get_json()["data"] == {"won": False, "firing": T, "host": settings.host_name}


@pytest.mark.parametrize("path, body, status", [
    ("/open/crons/999/claim", {"at": T}, 404),
    ("/open/crons/{id}/claim", {"at": "soon"}, 400),
    ("/open/crons/{id}/claim", {"at": -1}, 400)])
def test_a_claim_for_no_cron_or_a_bad_time_is_refused_and_writes_nothing(
        client, auth, make_cron, path, body, status):
    cron = make_cron(hosts_mode="one")
    response = client.post(path.format(id=cron["id"]), json=body, headers=auth)
    assert response.status_code == status
    with db.database.connection_context():
        assert Claim.select().count() == 0


def test_a_claim_needs_a_token(client, make_cron):
    cron = make_cron()
    assert client.post(f"/open/crons/{cron['id']}/claim", json={"at": T}).status_code == 401


# --- task.sh claims first -------------------------------------------------------------------

@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server(request, tmp_path_factory):
    server, cleanup = start_module_server(tmp_path_factory, request.param)
    yield server
    cleanup()


@pytest.fixture(params=list(SHELLS))
def shell(request) -> str:
    return request.param


def one_cron(server) -> dict:
    # A yearly firing: every run of the test is nearest to the same one.
    status, body = http("POST", f"{server.url}/open/crons",
                        {"name": "once", "command": "true", "schedule": "0 0 1 1 *",
                         "hosts": ["*"], "hosts_mode": "one"}, server.headers)
    assert status == 200, body
    return body["data"]


def test_task_sh_runs_a_one_cron_only_where_its_claim_wins(server, shell, tmp_path):
    cron = one_cron(server)
    tools = ToolDir(str(tmp_path / "bin"), tools=("date", "mkdir", "sleep", "curl", "rm"))
    mark = tmp_path / "ran"
    run_cli({"QL_DATA_DIR": server.data_dir, "QL_DB_URL": server.db_url}, "token", "runner")
    env = task_env(server, server.data_dir, cron["id"], tools, marker=True, QL_CLAIM="1")
    first = run_task(shell, f"echo x >> {mark}", env)
    second = run_task(shell, f"echo x >> {mark}", env)
    assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
    assert mark.read_text() == "x\n"
    assert len(runs_of(server, cron["id"])) == 1
    assert len(instances_of(server, cron["id"])) == 1


def test_task_sh_does_not_run_a_one_cron_when_the_claim_cannot_be_made(server, shell, tmp_path):
    cron = one_cron(server)
    tools = ToolDir(str(tmp_path / "bin"), tools=("date", "mkdir", "sleep", "curl", "rm"))
    mark = tmp_path / "ran"
    data = str(tmp_path / "data")
    env = task_env(server, data, cron["id"], tools, marker=True, QL_CLAIM="1",
                   QL_BASE_URL="http://127.0.0.1:9", QL_CALLBACK_TIMEOUT="2")
    result = run_task(shell, f"echo x >> {mark}", env)
    assert result.returncode == 75
    assert not mark.exists()
    assert "could not be claimed" in read_logs(data)
