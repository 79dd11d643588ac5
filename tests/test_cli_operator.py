"""The CLI answers the operator (issue 35): `cron list`/`show` with the health state and the
last exit code, and how long a sub-second run took; crons named by name wherever one is
taken; `status` ending with the storage budget's use; `notify -v` with no channel saying
so. Commands run as real child processes, on both databases."""
from __future__ import annotations

import json
import re
import time

import pytest

from helpers import SHADOW_ON, STATUS_PATH, cli_env, run_cli
from test_cli_output import SECONDS, execute, rows

pytestmark = pytest.mark.shadow_on


@pytest.fixture
def env(settings) -> dict:
    return {**cli_env(settings), **SHADOW_ON, "TZ": "CST-8"}


def _one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def _record(text: str) -> dict:
    return {k: v.strip() for k, v in (line.split(": ", 1) for line in text.splitlines()[:-1])}


def quick_run(client, auth, cron_id: int, exit_code: int, n: int) -> None:
    """A run under a second: task.sh sends last_running_time 0. Its start is a second ahead
    of the server's clock (a task clock a little fast), so that start and finish fall in
    one second however slow this machine is."""
    start = int(time.time()) + 1
    body = {"ids": [cron_id], "pid": 5000 + n, "last_execution_time": start,
            "execution_id": f"legacy-system:{start}:{n:08x}-9d4a-4e6b-8f1a-2c3d4e5f6a7b",
            "log_path": f"q/{n}.log"}
    assert client.put(STATUS_PATH, json={**body, "status": 0}, headers=auth).status_code == 200
    done = {**body, "status": 1, "exit_code": exit_code, "last_running_time": 0}
    assert client.put(STATUS_PATH, json=done, headers=auth).status_code == 200


# --- health state, exit code, took ---------------------------------------------------------

def test_cron_list_and_show_give_the_health_state_and_the_last_exit_code(
        client, auth, make_cron, env):
    failing = make_cron(name="failing", command="false", schedule="0 4 * * *")["id"]
    fine = make_cron(name="fine", command="true", schedule="0 4 * * *")["id"]
    execute(client, auth, failing, SECONDS, 3)
    execute(client, auth, fine, SECONDS, 0, n=1)
    health = {h["cron_id"]: h["state"] for h in
              client.get("/open/crons/health", headers=auth).get_json()["data"]}
    assert (health[failing], health[fine]) == ("failed", "ok")

    listed = rows(run_cli(env, "cron", "list").stdout)
    shown = _record(run_cli(env, "cron", "show", str(failing)).stdout)

    assert listed[0][:5] == ["id", "name", "schedule", "state", "exit"]
    by_id = {int(row[0]): row for row in listed[1:]}
    assert by_id[failing][7:9] == ["failed", "3"]  # after the five schedule fields
    assert by_id[fine][7:9] == ["ok", "0"]
    assert (shown["state"], shown["last exit"], shown["process"]) == ("failed", "3", "idle")


def test_a_run_under_a_second_took_under_a_second_not_the_run_before(
        client, auth, make_cron, env):
    cron_id = make_cron(name="quick", command="true", schedule="0 4 * * *")["id"]
    execute(client, auth, cron_id, SECONDS, 0)  # took 3 s: the cron keeps last_running_time 3
    quick_run(client, auth, cron_id, 0, n=1)
    assert client.get(f"/open/crons/{cron_id}", headers=auth).get_json()["data"][
        "last_running_time"] == 3

    listed = rows(run_cli(env, "cron", "list").stdout)
    shown = _record(run_cli(env, "cron", "show", "quick").stdout)

    assert listed[1][-2] == "<1s"  # took, before the command `true`
    assert shown["took"] == "<1s"


def test_a_never_run_cron_shows_new_and_no_exit(make_cron, env):
    make_cron(name="fresh", schedule="@boot")
    (row,) = rows(run_cli(env, "cron", "list").stdout)[1:]
    assert row[2:5] == ["@boot", "new", "-"]


# --- names ---------------------------------------------------------------------------------

def test_a_cron_is_taken_by_its_name_wherever_one_is_taken(client, auth, make_cron, env):
    backup = make_cron(name="backup", command="task backup.sh")["id"]
    sync = make_cron(name="sync", command="task sync.sh")["id"]
    execute(client, auth, backup, SECONDS, 0, log_path="backup/a.log")
    execute(client, auth, sync, SECONDS + 60, 0, n=1)

    assert _record(run_cli(env, "cron", "show", "backup").stdout)["id"] == str(backup)
    runs = json.loads(run_cli(env, "runs", "--cron", "backup", "--json").stdout)["data"]
    assert [r["cron_id"] for r in runs] == [backup]
    legacy = json.loads(run_cli(env, "runs", "--legacy", "--cron", "sync", "--json").stdout)
    assert [r["cron_id"] for r in legacy["data"]] == [sync]
    assert run_cli(env, "cron", "disable", "sync", str(backup), "sync").stdout == (
        f"disabled cron {sync} (sync), cron {backup} (backup)\n")
    assert run_cli(env, "cron", "enable", "backup").stdout == f"enabled cron {backup} (backup)\n"
    log = run_cli(env, "log", "--cron", "backup", check=False)
    assert log.returncode == 1 and _one_line(log).startswith("qlshadow: instance ")  # no log file
    gate = run_cli(env, "reconcile", "--cron", "backup", "--json", check=False)
    assert gate.returncode in (0, 1, 3) and not gate.stderr, gate.stderr


@pytest.mark.parametrize("args", [("cron", "show", "{}"), ("cron", "rm", "{}"),
                                  ("cron", "run", "{}"), ("runs", "--cron", "{}"),
                                  ("log", "--cron", "{}"), ("reconcile", "--cron", "{}")])
def test_an_unknown_or_ambiguous_name_is_one_line_and_exit_1(make_cron, env, args):
    first = make_cron(name="twin")["id"]
    second = make_cron(name="twin")["id"]
    make_cron(name="other")

    unknown = run_cli(env, *(a.format("nosuch") for a in args), check=False)
    ambiguous = run_cli(env, *(a.format("twin") for a in args), check=False)

    assert unknown.returncode == 1
    assert _one_line(unknown) == ("qlshadow: no cron is named 'nosuch'; `qlshadow cron list` "
                                  "shows every cron's id and name")
    assert ambiguous.returncode == 1
    assert _one_line(ambiguous) == (f"qlshadow: 2 crons are named 'twin' (ids {first}, "
                                    f"{second}); name the one you mean by its id")
    assert json.loads(run_cli(env, "cron", "list", "--json").stdout).__len__() == 3


# --- status: the storage line ----------------------------------------------------------------

def test_status_ends_with_the_storage_budgets_use(make_cron, env, settings, backend):
    make_cron(name="a")
    lines = run_cli({**env, "QL_STORAGE_BUDGET": "16M"}, "status").stdout.splitlines()
    as_json = json.loads(run_cli(env, "status", "--json").stdout)

    if backend == "sqlite":
        match = re.fullmatch(r"storage: ([0-9.]+) (B|KiB|MiB) of 16\.0 MiB \(([0-9]+)%\)",
                             lines[-1])
        assert match, lines[-1]
        used = float(match.group(1)) * {"B": 1, "KiB": 1024, "MiB": 1024 ** 2}[match.group(2)]
        assert 0 < used < 16 * 1024 ** 2
        assert int(match.group(3)) == round(100 * used / (16 * 1024 ** 2))
        unbudgeted = run_cli({**env, "QL_STORAGE_BUDGET": "0"}, "status").stdout
        assert re.search(r"\nstorage: [0-9.]+ (B|KiB|MiB) used, no budget set "
                         r"\(QL_STORAGE_BUDGET\)\n$", unbudgeted), unbudgeted
    else:
        assert lines[-1] == ("storage: task logs 0 B; the database is PostgreSQL, which keeps "
                             "its own files (no budget)")
    assert list(as_json) == ["data"]  # the JSON stays the API's document


# --- notify -v --------------------------------------------------------------------------------

def test_notify_v_without_a_channel_says_what_it_did(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    env = {"QL_DATA_DIR": str(data)}

    bare = run_cli(env, "notify", "-v")
    (data / "notify.conf").write_text("WEBHOOK_URL=\n")
    with_conf = run_cli(env, "notify", "-v")
    quiet = run_cli(env, "notify")

    said = "nothing was checked or sent: no notification channel is configured"
    assert bare.returncode == 0 and bare.stdout == (
        f"{said} in the environment (no --config); docs/NOTIFY.md lists the variables\n")
    conf = data / "notify.conf"
    assert with_conf.stdout == (f"{said} in the environment (no --config); crond's tick reads "
                                f"{conf}: qlshadow notify -v --config {conf}\n")
    explicit = run_cli(env, "--config", str(conf), "notify", "-v")
    assert explicit.stdout == f"{said} in {conf} or the environment\n"
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
