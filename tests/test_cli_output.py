"""What the `qlshadow` commands print: tables for people in local time (zone named, --utc),
--json for scripts, one line per change, `runs --failed`, `log` (tail and follow), and
quiet behaviour in a pipe. Commands run as real child processes."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from qlshadow.cli.textout import duration
from helpers import ONE_BACKEND, ROOT, SHADOW_ON, STATUS_PATH, cli_env, run_cli

pytestmark = pytest.mark.shadow_on

# 2025-11-30 00:00:00 UTC, 08:00:00 in the box's zone (CST-8).
SECONDS = 1764460800


@pytest.fixture
def env(settings) -> dict:
    """The CLI's environment: this test's database, Shadow on, the box in UTC+8."""
    return {**cli_env(settings), **SHADOW_ON, "TZ": "CST-8"}


def execution_id(seconds: int, n: int) -> str:
    return f"legacy-system:{seconds}:{n:08x}-9d4a-4e6b-8f1a-2c3d4e5f6a7b"


def execute(client, auth, cron_id: int, seconds: int, exit_code: int | None, n: int = 0,
            log_path: str | None = None) -> None:
    """A crond execution's callbacks: running, then (unless exit_code is None) idle."""
    body = {"ids": [cron_id], "pid": 4000 + n, "last_execution_time": seconds,
            "execution_id": execution_id(seconds, n), "log_path": log_path or f"c/{n}.log"}
    assert client.put(STATUS_PATH, json={**body, "status": 0}, headers=auth).status_code == 200
    if exit_code is not None:
        done = {**body, "status": 1, "exit_code": exit_code, "last_running_time": 3}
        assert client.put(STATUS_PATH, json=done, headers=auth).status_code == 200


def api(client, auth, path: str):
    response = client.get(path, headers=auth)
    assert response.status_code == 200, response.get_json()
    return response.get_json()["data"]


def rows(text: str) -> list:
    """Table lines split on whitespace, header first."""
    return [line.split() for line in text.splitlines()]


# --- cron ------------------------------------------------------------------------------------

def test_cron_list_is_a_table_in_local_time_with_the_zone_named(client, auth, make_cron, env):
    backup = make_cron(name="backup", command="task backup.sh", schedule="0 4 * * *")["id"]
    other = make_cron(name="sync", command="task sync.sh", schedule="*/5 * * * *")["id"]
    execute(client, auth, backup, SECONDS, 0)
    run_cli(env, "cron", "disable", str(other))

    local = run_cli(env, "cron", "list").stdout
    in_utc = run_cli(env, "cron", "list", "--utc").stdout

    assert rows(local) == [
        ["id", "name", "schedule", "state", "exit", "last", "run", "took", "command"],
        [str(other), "sync", "*/5", "*", "*", "*", "*", "paused", "-", "-", "-", "task", "sync.sh"],
        [str(backup), "backup", "0", "4", "*", "*", "*", "ok", "0", "2025-11-30", "08:00:00",
         "CST", "3s", "task", "backup.sh"]]
    assert "2025-11-30 00:00:00 UTC" in in_utc.splitlines()[2]


def test_cron_list_json_is_the_apis_crons(client, auth, make_cron, env):
    for name in ("a", "b"):
        make_cron(name=name)

    printed = json.loads(run_cli(env, "cron", "list", "--json").stdout)

    assert printed == api(client, auth, "/open/crons?size=500")["data"]


def test_cron_list_without_crons_says_how_to_add_one(env, app):
    assert run_cli(env, "cron", "list").stdout == (
        "no crons yet: add one with `qlshadow cron add SCHEDULE COMMAND`\n")


def test_cron_show_is_one_field_a_line_and_says_where_its_log_is(client, auth, make_cron, env):
    cron_id = make_cron(name="backup", command="task backup.sh", schedule="0 4 * * *")["id"]
    execute(client, auth, cron_id, SECONDS, 0, log_path="cron_1/a.log")

    shown = run_cli(env, "cron", "show", str(cron_id)).stdout.splitlines()
    as_json = json.loads(run_cli(env, "cron", "show", str(cron_id), "--json").stdout)

    fields = dict(line.split(": ", 1) for line in shown[:-1])
    assert {k: v.strip() for k, v in fields.items() if k in (
        "id", "name", "command", "schedule", "state", "process", "last run", "last exit",
        "took", "log")} == {
        "id": str(cron_id), "name": "backup", "command": "task backup.sh",
        "schedule": "0 4 * * *", "state": "ok", "process": "idle",
        "last run": "2025-11-30 08:00:00 CST", "last exit": "0", "took": "3s",
        "log": "cron_1/a.log"}
    assert shown[-1] == f"its latest log: qlshadow log --cron {cron_id}"
    assert as_json == api(client, auth, f"/open/crons/{cron_id}")


def test_each_change_says_what_it_did_in_one_line(app, env):
    added = run_cli(env, "cron", "add", "0 4 * * *", "task backup.sh", "--name", "backup")
    run_cli(env, "cron", "add", "@boot", "task boot.sh")

    assert added.stdout == "added cron 1 (backup) at 0 4 * * *\n"
    assert run_cli(env, "cron", "disable", "1").stdout == "disabled cron 1 (backup)\n"
    assert run_cli(env, "cron", "enable", "1", "2").stdout == (
        "enabled cron 1 (backup), cron 2 (task boot.sh)\n")
    assert run_cli(env, "cron", "rm", "2").stdout == "deleted cron 2 (task boot.sh)\n"
    assert json.loads(run_cli(env, "cron", "add", "@boot", "x", "--json").stdout)["id"] == 3


# --- runs ------------------------------------------------------------------------------------

@pytest.fixture
def history(client, auth, make_cron) -> dict:
    """backup: exited 0, then exited 2; sync: still running. Returns names -> cron ids."""
    backup, sync = make_cron(name="backup")["id"], make_cron(name="sync")["id"]
    execute(client, auth, backup, SECONDS, 0, n=1)
    execute(client, auth, backup, SECONDS + 86400, 2, n=2)
    execute(client, auth, sync, SECONDS + 2 * 86400, None, n=3)
    return {"backup": backup, "sync": sync}


def test_runs_is_a_table_of_whole_run_ids_and_json_is_the_apis(client, auth, history, env):
    listed = api(client, auth, "/open/runs")
    answer = client.get("/open/runs", headers=auth).get_json()

    table = rows(run_cli(env, "runs").stdout)
    document = json.loads(run_cli(env, "runs", "--json").stdout)
    printed = document["data"]

    assert table[0] == ["run", "cron", "name", "started", "state", "exit", "took"]
    assert [row[0] for row in table[1:]] == [r["id"] for r in listed]
    # Open since 2025, far past its limit: every surface calls it stuck (watch/health/).
    assert table[1][1:] == [str(history["sync"]), "sync", "2025-12-02", "08:00:00", "CST",
                            "stuck", "-", "-"]
    # A Run finishes when its idle callback arrives (here: now, long after SECONDS).
    took = duration(listed[1]["finished_at"] - listed[1]["attempt"]["started_at"])
    assert table[2][1:] == [str(history["backup"]), "backup", "2025-12-01", "08:00:00", "CST",
                            "exited", "2", took]
    assert printed == listed
    assert document == {"data": answer["data"]}  # the API's document, as the README says


def test_runs_failed_lists_only_runs_that_exited_non_zero(client, auth, history, env):
    failed = [r for r in api(client, auth, "/open/runs") if r["exit_code"] == 2]

    table = rows(run_cli(env, "runs", "--failed").stdout)
    printed = json.loads(run_cli(env, "runs", "--failed", "--json").stdout)["data"]

    assert [row[0] for row in table[1:]] == [failed[0]["id"]]
    assert printed == failed


def test_runs_failed_with_shadow_off_lists_failed_legacy_instances(client, auth, history, env):
    shadow_off = {k: v for k, v in env.items() if k not in SHADOW_ON}
    instances = api(client, auth, f"/open/crons/{history['backup']}/instances")

    table = rows(run_cli(shadow_off, "runs", "--failed").stdout)
    printed = json.loads(run_cli(shadow_off, "runs", "--failed", "--json").stdout)["data"]
    legacy = json.loads(run_cli(env, "runs", "--legacy", "--json").stdout)["data"]

    assert table == [["instance", "cron", "name", "started", "state", "exit", "took"],
                     [str(instances[0]["id"]), str(history["backup"]), "backup", "2025-12-01",
                      "08:00:00", "CST", "failed", "2",
                      duration(instances[0]["finished_at"] - instances[0]["started_at"])]]
    assert printed == [instances[0]]
    assert [i["cron_id"] for i in legacy] == [history["sync"], history["backup"], history["backup"]]


def test_runs_are_filtered_by_time_state_and_cron(history, env):
    def cron_and_state(*args):
        return [(r["cron_id"], r["state"], r["exit_code"])
                for r in json.loads(run_cli(env, "runs", "--json", *args).stdout)["data"]]

    backup, sync = history["backup"], history["sync"]
    assert cron_and_state("--since", "2025-12-01") == [(sync, "running", None),
                                                       (backup, "exited", 2)]
    assert cron_and_state("--since", "2025-12-01", "--until", "2025-12-02T08:00+08:00") == [
        (backup, "exited", 2)]
    assert cron_and_state("--until", str(SECONDS + 1)) == [(backup, "exited", 0)]
    assert cron_and_state("--state", "running") == []  # open, but far past its limit
    assert cron_and_state("--state", "stuck") == [(sync, "running", None)]
    assert cron_and_state("--state", "finish_lost") == []
    assert cron_and_state("--cron", str(backup), "--since", "2025-11-30T00:00:01Z") == [
        (backup, "exited", 2)]
    assert cron_and_state("--since", "today") == []


def test_a_full_page_says_how_to_get_the_next_one(history, env):
    first = run_cli(env, "runs", "--limit", "2").stdout.splitlines()
    last_id = first[-2].split()[0]
    second = rows(run_cli(env, "runs", "--limit", "2", "--before", last_id).stdout)

    assert first[-1] == f"more: add --before {last_id}"
    assert len(second) == 2 and second[1][1] == str(history["backup"])
    assert not second[-1][0].startswith("more")


@pytest.mark.parametrize("args, words", [
    (("--state", "finished"), "--state 'finished' is not a state of Shadow Runs"),
    (("--before", "12"), "--before takes a run id"),
])
@ONE_BACKEND
def test_runs_refuses_options_that_do_not_fit_the_table_in_one_line(app, env, args, words):
    result = run_cli(env, "runs", *args, check=False)
    (line,) = result.stderr.splitlines()
    assert result.returncode == 1 and line.startswith(f"qlshadow: {words}")


@ONE_BACKEND
@pytest.mark.parametrize("option", ["--since", "--until"])
def test_a_bad_time_is_a_usage_error_naming_the_option(app, env, option):
    result = run_cli(env, "runs", option, "last tuesday", check=False)
    (line,) = result.stderr.splitlines()
    assert result.returncode == 2 and f"argument {option}: 'last tuesday' is not a time" in line


def test_nothing_failed_says_so(app, env):
    assert run_cli(env, "runs", "--failed").stdout == (
        "no failed Shadow Runs match (manual runs are Legacy instances only: add --legacy)\n")


# --- accept-failures, reconcile --------------------------------------------------------------

def test_accept_failures_is_a_table_and_failures_its_old_name(client, auth, env, app):
    body = {"ids": [999], "status": 0, "pid": 1, "last_execution_time": SECONDS,
            "execution_id": execution_id(SECONDS, 0)}
    assert client.put(STATUS_PATH, json=body, headers=auth).status_code == 200

    table = run_cli(env, "accept-failures")
    old = run_cli(env, "failures")
    printed = json.loads(run_cli(env, "accept-failures", "--json").stdout)

    assert rows(table.stdout)[0] == ["id", "at", "reason", "cron", "detail"]
    assert rows(table.stdout)[1][0] == "1"
    assert "unknown_cron" in table.stdout and "999" in table.stdout and table.stderr == ""
    assert old.stdout == table.stdout
    assert old.stderr == "qlshadow: 'failures' is the old name of 'accept-failures'\n"
    assert [(f["reason"], f["cron_id"]) for f in printed] == [("unknown_cron", 999)]
    assert printed == api(client, auth, "/open/runs/failures")


@ONE_BACKEND
def test_reconcile_takes_yesterday_and_durations(app, make_cron, env):
    make_cron()
    result = run_cli(env, "reconcile", "--since", "yesterday", "--stuck-after", "2h", check=False)
    assert result.returncode in (0, 1, 3) and result.stderr == ""
    assert result.stdout.startswith("reconcile ") and " CST .. " in result.stdout.splitlines()[0]


# --- pipes -----------------------------------------------------------------------------------

SHELLS = [shell for shell in ("dash", "bash") if shutil.which(shell)] + [
    "/opt/qlshadow-ci/busybox-static/bin/busybox sh"]


@ONE_BACKEND
@pytest.mark.parametrize("shell", SHELLS)
def test_a_reader_that_leaves_early_ends_the_command_quietly(app, env, shell, tmp_path):
    from qlshadow.service import crons
    from qlshadow.storage import db
    with db.database.connection_context(), db.write_transaction():
        for n in range(300):  # a 1 MB table: far more than a pipe holds once head has left
            crons.create({"name": f"job {n}", "command": "x" * 3500, "schedule": "@boot"})
    full = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
    full.update(env, PY=sys.executable)
    script = ('{ "$PY" -m qlshadow.cli cron list --json 2>"$1"; echo $? >"$2"; } | head -1; '
              '"$PY" -m qlshadow.cli cron list 2>>"$1" | head -1; '
              '"$PY" -m qlshadow.cli cron show 1 2>>"$1" | head -1')
    err, status = tmp_path / "err", tmp_path / "status"

    result = subprocess.run([*shell.split(), "-c", script, "sh", str(err), str(status)], env=full,
                            cwd=ROOT, capture_output=True, text=True, timeout=60)

    opening, header, shown = result.stdout.splitlines()
    assert (opening, header.split()[:3], shown.split()) == (
        "[", ["id", "name", "schedule"], ["id:", "1"])
    assert err.read_text() == "" and result.stderr == ""
    assert status.read_text() == "141\n"  # as a command that SIGPIPE ended


# --- log -------------------------------------------------------------------------------------

def test_log_prints_the_last_lines_of_a_run_an_instance_or_a_crons_latest(client, auth,
                                                                          make_cron, env,
                                                                          settings):
    cron_id = make_cron()["id"]
    folder = os.path.join(settings.log_dir, "c")
    os.makedirs(folder)
    for n in (1, 2):
        with open(os.path.join(folder, f"{n}.log"), "w") as fh:
            fh.write("".join(f"run {n} line {i}\n" for i in range(1, 101)))
        execute(client, auth, cron_id, SECONDS + n, 0, n=n)
    run = api(client, auth, "/open/runs")[1]  # the first execution
    instance = api(client, auth, f"/open/crons/{cron_id}/instances")[1]

    by_run = run_cli(env, "log", run["id"], "-n", "2").stdout
    by_instance = run_cli(env, "log", "--instance", str(instance["id"])).stdout
    latest = run_cli(env, "log", "--cron", str(cron_id), "-n", "1").stdout

    assert by_run == "run 1 line 99\nrun 1 line 100\n"
    assert by_instance.splitlines() == [f"run 1 line {i}" for i in range(51, 101)]
    assert latest == "run 2 line 100\n"


@ONE_BACKEND
@pytest.mark.parametrize("stored, words", [("c/none.log", "gone (pruned or deleted)"),
                                           ("../../secret", "leaves the log directory")])
def test_log_of_an_unreadable_log_fails_in_one_line(client, auth, make_cron, env, stored, words):
    cron_id = make_cron()["id"]
    execute(client, auth, cron_id, SECONDS, 0, log_path=stored)

    result = run_cli(env, "log", "--cron", str(cron_id), check=False)
    (line,) = result.stderr.splitlines()
    assert result.returncode == 1 and line.startswith("qlshadow: instance 1: ") and words in line


def test_log_follow_prints_what_the_task_writes_until_it_has_finished(client, auth, make_cron,
                                                                      env, settings):
    cron_id = make_cron()["id"]
    path = os.path.join(settings.log_dir, "c", "0.log")
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as fh:
        fh.write("started\n")
    execute(client, auth, cron_id, SECONDS, None)
    full = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
    follower = subprocess.Popen([sys.executable, "-m", "qlshadow.cli", "log", "--cron",
                                 str(cron_id), "-f"], env={**full, **env}, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follower.stdout.readline() == "started\n"  # it is following now
        # A writer in its own process, as the task is: lines arrive while -f is following.
        subprocess.run(["sh", "-c", 'for i in 1 2 3; do echo "line $i" >>"$1"; sleep 0.2; done',
                        "sh", path], check=True, timeout=60)
        assert follower.poll() is None  # still running: the execution has not finished
        execute_end = {"ids": [cron_id], "pid": 4000, "last_execution_time": SECONDS,
                       "execution_id": execution_id(SECONDS, 0), "log_path": "c/0.log",
                       "status": 1, "exit_code": 0}
        with open(path, "a") as fh:
            fh.write("last line\n")
        assert client.put(STATUS_PATH, json=execute_end, headers=auth).status_code == 200
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait(10)
    assert (follower.returncode, err) == (0, "")
    assert out == "line 1\nline 2\nline 3\nlast line\n"


@ONE_BACKEND
@pytest.mark.parametrize("args", [("log", "--instance", str(2**64)), ("cron", "show", str(2**64)),
                                  ("runs", "--cron", "0"), ("cron", "rm", str(2**64))])
def test_an_id_that_cannot_exist_is_a_usage_error_in_one_line(app, env, args):
    result = run_cli(env, *args, check=False)
    (line,) = result.stderr.splitlines()
    assert result.returncode == 2 and "is not a positive integer" in line


@ONE_BACKEND
def test_log_of_an_unknown_run_instance_or_cron_says_so_in_one_line(app, env):
    for args, words in ((("019ad20f-2800-7b96-9e03-1ff0f2a0435b",), "Run 019ad20f"),
                        (("nope",), "Run nope does not exist"),
                        (("--instance", "7"), "instance 7 does not exist"),
                        (("--cron", "7"), "Cron 7 does not exist")):
        result = run_cli(env, "log", *args, check=False)
        (line,) = result.stderr.splitlines()
        assert result.returncode == 1 and words in line, line


@ONE_BACKEND
def test_log_follow_ends_quietly_on_ctrl_c(client, auth, make_cron, env, settings):
    import signal
    cron_id = make_cron()["id"]
    path = os.path.join(settings.log_dir, "c", "0.log")
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as fh:
        fh.write("started\n")
    execute(client, auth, cron_id, SECONDS, None)  # still running: -f would go on
    full = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
    follower = subprocess.Popen([sys.executable, "-m", "qlshadow.cli", "log", "--cron",
                                 str(cron_id), "-f"], env={**full, **env}, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follower.stdout.readline() == "started\n"
        follower.send_signal(signal.SIGINT)
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait(10)
    assert (follower.returncode, out, err) == (130, "", "")


def test_the_cli_names_each_2x_cron_status_with_the_pages_words():
    from qlshadow.cli.cmd_crons import _cron_state
    codes = (0, 1, 2, 3, 7)

    assert [_cron_state({"isDisabled": 0, "status": code}) for code in codes] == [
        "running", "idle", "disabled", "queued", "7"]
    assert _cron_state({"isDisabled": 1, "status": 0}) == "disabled"
