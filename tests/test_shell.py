"""shell/task.sh, run for real under BusyBox sh, dash and bash against a live server.

One server per backend serves the whole module (Shadow on); every test makes its own cron,
data dir and PATH, so tests share nothing but the database.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import time

import pytest

from qlshadow.host.crontab import needs_escape, shell_word
from helpers import BACKENDS
from shellenv import (SHELL_FILES, SHELL_DIR, SHELLS, ToolDir, create_cron, cron_of, fake_uuid,
                      instances_of, read_logs, run_task, runs_of, shell_argv,
                      start_module_server, task_env, which, write_token)

EXECUTION_ID = re.compile(
    r"legacy-system:([1-9][0-9]*):[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\Z")


@pytest.fixture(scope="module", params=BACKENDS)
def server(request, tmp_path_factory):
    srv, cleanup = start_module_server(tmp_path_factory, request.param)
    yield srv
    cleanup()


@pytest.fixture(params=list(SHELLS))
def shell(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def runner_token_file(server, tmp_path_factory) -> str:
    """runner-token.json made once per server by `qlshadow token runner` from its database."""
    from helpers import run_cli
    path = str(tmp_path_factory.mktemp("runner"))
    run_cli({"QL_DATA_DIR": path, "QL_DB_URL": server.db_url}, "token", "runner")
    return os.path.join(path, "runner-token.json")


@pytest.fixture
def data_dir(tmp_path, runner_token_file) -> str:
    """The task's own data dir, holding a valid runner token from the server's database."""
    path = str(tmp_path / "data")
    os.makedirs(path)
    # A copy: a test may expire or delete its token without touching the next test's.
    shutil.copy2(runner_token_file, path)
    return path


@pytest.fixture
def tools(tmp_path) -> ToolDir:
    """PATH with date, mkdir, sleep and curl only: no uuidgen, python3 or node."""
    return ToolDir(str(tmp_path / "bin"))


@pytest.fixture
def calls(tmp_path) -> str:
    """A file where recording fake programs note that they ran."""
    return str(tmp_path / "calls.txt")


def hidden_uuid(tmp_path, content: str = "") -> str:
    """A file to bind-mount over the kernel's UUID file."""
    path = tmp_path / "uuid"
    path.write_text(content)
    return str(path)


def called(calls: str) -> list:
    """The fake or recording programs that ran, in order."""
    if not os.path.exists(calls):
        return []
    with open(calls) as fh:
        return fh.read().split()


def only_run(server, cron_id: int) -> dict:
    runs = runs_of(server, cron_id)
    assert len(runs) == 1, runs
    return runs[0]


def finished_instance(server, cron_id: int) -> dict:
    instances = instances_of(server, cron_id)
    assert len(instances) == 1, instances
    assert instances[0]["finished_at"] is not None, instances
    return instances[0]


# --- syntax and validation (no server) -----------------------------------------------------

@pytest.mark.parametrize("name", SHELL_FILES)
def test_each_shell_file_passes_a_syntax_check(shell, name):
    result = subprocess.run([*shell_argv(shell), "-n", os.path.join(SHELL_DIR, name)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


CANDIDATES = {
    "3f2b8c1e-9d4a-4e6b-8f1a-2c3d4e5f6a7b": True,
    "00000000-0000-4000-b000-000000000000": True,
    "3F2B8C1E-9D4A-4E6B-8F1A-2C3D4E5F6A7B": False,  # uppercase
    "3f2b8c1e-9d4a-1e6b-8f1a-2c3d4e5f6a7b": False,  # version 1
    "3f2b8c1e-9d4a-4e6b-cf1a-2c3d4e5f6a7b": False,  # variant c
    "{3f2b8c1e-9d4a-4e6b-8f1a-2c3d4e5f6a7b}": False,  # braces
    "3f2b8c1e-9d4a-4e6b-8f1a-2c3d4e5f6a7b ": False,  # trailing space
    "3f2b8c1e-9d4a-4e6b-8f1a-2c3d4e5f6a7bb": False,  # too long
    "3f2b8c1e9d4a4e6b8f1a2c3d4e5f6a7b": False,  # no dashes
    "3f2b8c1e-9d4a-4e6b-8f1a-2c3d4e5f6a7g": False,  # not hex
    "": False,
}


def test_the_uuid_check_accepts_only_canonical_lowercase_v4(shell):
    script = ". ./common.sh\nfor c in \"$@\"; do if ql_is_uuid4 \"$c\"; then echo y; else echo n; fi; done"
    result = subprocess.run([*shell_argv(shell), "-c", script, "sh", *CANDIDATES],
                            cwd=SHELL_DIR, capture_output=True, text=True)
    assert result.stdout.split() == ["y" if ok else "n" for ok in CANDIDATES.values()]


# --- the execution id ----------------------------------------------------------------------

def test_a_marked_run_becomes_one_exited_run_opened_and_closed_by_the_same_id(
        shell, server, data_dir, tools):
    cron = create_cron(server)
    result = run_task(shell, "exit 0", task_env(server, data_dir, cron["id"], tools, marker=True))
    assert result.returncode == 0, result.stderr
    run = only_run(server, cron["id"])
    # Both callbacks carried one id: the running one made the Run, the idle one closed it.
    assert [e["kind"] for e in run["events"]] == ["accepted", "spawned", "running", "exited"]
    assert run["state"] == "exited" and run["exit_code"] == 0


def test_the_execution_id_is_the_start_second_and_a_lowercase_v4_uuid(
        shell, server, data_dir, tools):
    cron = create_cron(server)
    run_task(shell, "exit 0", task_env(server, data_dir, cron["id"], tools, marker=True))
    run = only_run(server, cron["id"])
    match = EXECUTION_ID.match(run["request_id"])
    assert match, run["request_id"]
    assert int(match.group(1)) == cron_of(server, cron["id"])["last_execution_time"]


def test_an_unmarked_run_sends_legacy_callbacks_without_an_id(shell, server, data_dir, tools):
    cron = create_cron(server)
    result = run_task(shell, "exit 4", task_env(server, data_dir, cron["id"], tools, marker=False))
    assert result.returncode == 4
    assert finished_instance(server, cron["id"])["exit_code"] == 4
    assert runs_of(server, cron["id"]) == []


def test_the_command_does_not_inherit_the_marker(shell, server, data_dir, tools, tmp_path):
    tools.link("env")
    cron = create_cron(server)
    seen = tmp_path / "env.txt"
    run_task(shell, f"env > {seen}",
             task_env(server, data_dir, cron["id"], tools, marker=True))
    assert "ID=" in seen.read_text()
    assert "QL_EXECUTION_ORIGIN" not in seen.read_text()


# --- where the UUID comes from ---------------------------------------------------------------

def test_the_kernel_uuid_comes_first(shell, server, data_dir, tools, calls):
    tools.script("uuidgen", f'echo uuidgen >> "{calls}"; echo {fake_uuid()}')
    cron = create_cron(server)
    run_task(shell, "exit 0", task_env(server, data_dir, cron["id"], tools, marker=True))
    assert only_run(server, cron["id"])["state"] == "exited"
    assert called(calls) == []


def test_uuidgen_is_used_when_the_kernel_uuid_is_hidden(
        shell, server, data_dir, tools, calls, tmp_path):
    made = fake_uuid()
    tools.script("uuidgen", f'echo uuidgen >> "{calls}"; echo {made}')
    tools.recorder("python3", calls)
    cron = create_cron(server)
    run_task(shell, "exit 0", task_env(server, data_dir, cron["id"], tools, marker=True),
             hide_kernel_uuid=hidden_uuid(tmp_path))
    assert only_run(server, cron["id"])["request_id"].endswith(":" + made)
    assert called(calls) == ["uuidgen"]


def test_python3_is_used_when_the_kernel_and_uuidgen_are_missing(
        shell, server, data_dir, tools, calls, tmp_path):
    tools.recorder("python3", calls)
    tools.recorder("node", calls)
    cron = create_cron(server)
    run_task(shell, "exit 0", task_env(server, data_dir, cron["id"], tools, marker=True),
             hide_kernel_uuid=hidden_uuid(tmp_path))
    assert EXECUTION_ID.match(only_run(server, cron["id"])["request_id"])
    assert called(calls) == ["python3"]


def test_node_is_used_when_it_is_the_only_source_left(
        shell, server, data_dir, tools, calls, tmp_path):
    tools.recorder("node", calls)
    cron = create_cron(server)
    run_task(shell, "exit 0", task_env(server, data_dir, cron["id"], tools, marker=True),
             hide_kernel_uuid=hidden_uuid(tmp_path))
    assert EXECUTION_ID.match(only_run(server, cron["id"])["request_id"])
    assert called(calls) == ["node"]


def test_invalid_candidates_are_skipped_for_the_next_source(
        shell, server, data_dir, tools, calls, tmp_path):
    upper = fake_uuid().upper()
    tools.script("uuidgen", f'echo uuidgen >> "{calls}"; echo {upper}')
    tools.recorder("python3", calls)
    cron = create_cron(server)
    # The kernel file holds a version-1 UUID, uuidgen an uppercase one: python3 must win.
    run_task(shell, "exit 0", task_env(server, data_dir, cron["id"], tools, marker=True),
             hide_kernel_uuid=hidden_uuid(tmp_path, "3f2b8c1e-9d4a-1e6b-8f1a-2c3d4e5f6a7b\n"))
    request_id = only_run(server, cron["id"])["request_id"]
    assert EXECUTION_ID.match(request_id)
    assert not request_id.endswith(upper.lower())
    assert called(calls) == ["uuidgen", "python3"]


def test_without_any_uuid_source_the_task_runs_and_legacy_callbacks_are_sent(
        shell, server, data_dir, tools, tmp_path):
    cron = create_cron(server)
    result = run_task(shell, "echo ran; exit 6",
                      task_env(server, data_dir, cron["id"], tools, marker=True),
                      hide_kernel_uuid=hidden_uuid(tmp_path))
    assert result.returncode == 6
    assert finished_instance(server, cron["id"])["exit_code"] == 6
    assert runs_of(server, cron["id"]) == []
    assert "ran" in read_logs(data_dir)


# --- transport -----------------------------------------------------------------------------

@pytest.mark.parametrize("with_timeout", [True, False], ids=["timeout", "watchdog"])
def test_busybox_wget_sends_the_callbacks_when_curl_is_missing(
        shell, server, data_dir, tmp_path, with_timeout):
    tools = ToolDir(str(tmp_path / "bin"), tools=("date", "mkdir", "sleep"))
    tools.link("wget", which("busybox"))
    if with_timeout:
        tools.link("timeout", which("busybox"))
    cron = create_cron(server)
    result = run_task(shell, "exit 3", task_env(server, data_dir, cron["id"], tools, marker=True))
    assert result.returncode == 3
    run = only_run(server, cron["id"])
    assert (run["state"], run["exit_code"]) == ("exited", 3)
    assert "not delivered" not in read_logs(data_dir)


@pytest.fixture
def offline_dir(tmp_path) -> str:
    """A data dir with a token that looks valid, for tests that need no server."""
    path = str(tmp_path / "data")
    write_token(path, "t" * 43, int(time.time()) + 86400)
    return path


def offline_env(data_dir: str, tools: ToolDir, url: str, **extra) -> dict:
    return {"PATH": tools.path, "QL_DATA_DIR": data_dir, "QL_BASE_URL": url, "ID": "1",
            "QL_EXECUTION_ORIGIN": "scheduled_system", **extra}


def test_when_the_server_is_down_the_task_runs_and_keeps_its_exit_code(
        shell, offline_dir, tools):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    result = run_task(shell, "echo still ran; exit 5", offline_env(offline_dir, tools, closed))
    assert result.returncode == 5
    log = read_logs(offline_dir)
    assert "still ran" in log
    assert "running callback not delivered" in log and "idle callback not delivered" in log


@pytest.mark.parametrize("transport", ["curl", "wget"])
def test_a_server_that_never_answers_does_not_hold_the_task(offline_dir, tmp_path, transport):
    """A callback is bounded by QL_CALLBACK_TIMEOUT; the task ends with its own code."""
    tools = ToolDir(str(tmp_path / "bin"), tools=("date", "mkdir", "sleep"))
    tools.link(transport, which("curl") if transport == "curl" else which("busybox"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)  # accepts connections, never answers
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        result = run_task("busybox", "exit 2",
                          offline_env(offline_dir, tools, url, QL_CALLBACK_TIMEOUT="1"), timeout=30)
    assert result.returncode == 2
    assert read_logs(offline_dir).count("callback not delivered") == 2


# --- token -----------------------------------------------------------------------------------

@pytest.mark.parametrize("state", ["expired", "missing"])
def test_an_expired_or_missing_token_is_refreshed_before_the_callbacks(
        shell, server, data_dir, tools, state):
    token_file = os.path.join(data_dir, "runner-token.json")
    if state == "expired":
        write_token(data_dir, server.token, int(time.time()) - 10)
    else:
        os.unlink(token_file)
    cron = create_cron(server)
    result = run_task(shell, "exit 0", task_env(server, data_dir, cron["id"], tools, marker=True))
    assert result.returncode == 0
    with open(token_file) as fh:
        fresh = json.load(fh)
    assert fresh["value"] != server.token and fresh["expiration"] > time.time()
    assert only_run(server, cron["id"])["state"] == "exited"
    assert "not delivered" not in read_logs(data_dir)


# --- the log -------------------------------------------------------------------------------

def test_the_output_goes_to_a_log_file_named_by_log_path(shell, server, data_dir, tools):
    cron = create_cron(server)
    run_task(shell, "echo out; echo err >&2",
             task_env(server, data_dir, cron["id"], tools, marker=False, QL_LOG_NAME="nightly"))
    log_path = cron_of(server, cron["id"])["log_path"]
    assert re.fullmatch(r"nightly/\d{4}(-\d\d){5}-\d+\.log", log_path), log_path
    with open(os.path.join(data_dir, "log", log_path)) as fh:
        assert fh.read() == "out\nerr\n"


def test_an_escaped_command_is_decoded_before_it_runs(shell, server, data_dir, tools, tmp_path):
    out = tmp_path / "out.txt"
    command = f"printf '100%% done\\n' > {out}\necho second line >> {out}"
    assert needs_escape(command)
    word = shell_word(command, escaped=True)
    run_task(shell, shlex.split(word)[0],
             task_env(server, data_dir, None, tools, marker=False, QL_ESCAPED="1"))
    assert out.read_text() == "100% done\nsecond line\n"
