"""No token or password in any process list during a task run, and one clean line per
failed callback in the task log (curl, BusyBox nc, BusyBox wget)."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
import time

import pytest

from helpers import BACKENDS, run_cli
from shellenv import (SHELLS, ToolDir, create_cron, read_logs, run_task, runs_of,
                      start_module_server, which)

PASSWORD = "pw-s3cr3t-%41"


@pytest.fixture(scope="module", params=BACKENDS)
def server(request, tmp_path_factory):
    srv, cleanup = start_module_server(tmp_path_factory, request.param)
    yield srv
    cleanup()


def recorded_tools(path: str, log: str, transport: str) -> ToolDir:
    """PATH with the base tools and a transport whose every argv is noted in log."""
    tools = ToolDir(path, tools=("date", "mkdir", "sleep", "mkfifo", "rm"))
    real = {"curl": which("curl"), "nc": which("busybox"), "wget": which("busybox")}
    for name in ("curl", "nc", "wget") if transport == "all" else (transport,):
        prefix = "" if name == "curl" else " " + name
        tools.script(name, f'printf "%s\\n" "{name} $*" >> "{log}"\n'
                           f'exec {real[name]}{prefix} "$@"')
    return tools


def runner_data_dir(server, path: str) -> str:
    os.makedirs(path)
    run_cli({"QL_DATA_DIR": path, "QL_DB_URL": server.db_url}, "token", "runner")
    with open(os.path.join(path, "runner.env"), "w") as fh:
        fh.write(f"ql_base_url={server.url}\nql_timeout=5\n")
    return path


def token_of(data_dir: str) -> str:
    import json
    with open(os.path.join(data_dir, "runner-token.json")) as fh:
        return json.load(fh)["value"]


class PsWatch:
    """Samples every process's argv (as `ps` shows them) until stopped."""

    def __init__(self):
        self.seen, self._stop = set(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self._stop.is_set():
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        with open(f"/proc/{pid}/cmdline", "rb") as fh:
                            self.seen.add(fh.read().replace(b"\0", b" "))
                    except OSError:
                        pass
            time.sleep(0.005)

    def stop(self) -> bytes:
        self._stop.set()
        self.thread.join(5)
        return b"\n".join(self.seen)


@pytest.mark.parametrize("transport", ["curl", "nc"])
def test_no_token_or_password_is_in_any_argv_or_the_task_environment(
        server, tmp_path, transport):
    data_dir = runner_data_dir(server, str(tmp_path / "data"))
    argv_log = str(tmp_path / "argv.log")
    tools = recorded_tools(str(tmp_path / "bin"), argv_log, transport)
    cron = create_cron(server)
    token = token_of(data_dir)
    env = {"PATH": tools.path, "SHELL": "/bin/sh", "QL_DATA_DIR": data_dir, "ID": str(cron["id"]),
           "QL_EXECUTION_ORIGIN": "scheduled_system"}
    watch = PsWatch()
    result = run_task("busybox", f"env > {tmp_path}/task.env; sleep 1", env)
    seen = watch.stop()
    assert result.returncode == 0
    assert runs_of(server, cron["id"])[0]["state"] == "exited"
    with open(argv_log) as fh:
        calls = fh.read()
    assert calls.count(transport + " ") == 2
    assert token not in calls
    assert token.encode() not in seen and b"task.sh" in seen
    with open(tmp_path / "task.env") as fh:
        task_env = fh.read()
    assert token not in task_env and "QL_DB_URL" not in task_env


def test_with_wget_alone_the_token_is_the_callback_only_one(server, tmp_path):
    """The one client that needs the token in argv gets a token that can do nothing else."""
    from helpers import http
    data_dir = runner_data_dir(server, str(tmp_path / "data"))
    argv_log = str(tmp_path / "argv.log")
    tools = recorded_tools(str(tmp_path / "bin"), argv_log, "wget")
    cron = create_cron(server)
    token = token_of(data_dir)
    result = run_task("busybox", "exit 0", {"PATH": tools.path, "QL_DATA_DIR": data_dir,
                                            "ID": str(cron["id"])})
    assert result.returncode == 0
    with open(argv_log) as fh:
        assert token in fh.read()
    headers = {"Authorization": f"Bearer {token}"}
    assert http("GET", f"{server.url}/open/crons", headers=headers)[0] == 403
    assert http("POST", f"{server.url}/open/crons", {"name": "x", "command": "id",
                                                     "schedule": "* * * * *"}, headers)[0] == 403
    assert http("GET", f"{server.url}/open/runs", headers=headers)[0] == 403


def _closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("transport", ["curl", "nc", "wget"])
@pytest.mark.parametrize("shell", list(SHELLS))
def test_a_failed_callback_is_one_clean_line_in_the_task_log(tmp_path, transport, shell):
    from shellenv import write_token
    data_dir = str(tmp_path / "data")
    write_token(data_dir, "t" * 43, int(time.time()) + 86400)
    tools = recorded_tools(str(tmp_path / "bin"), str(tmp_path / "argv.log"), transport)
    result = run_task(shell, "echo ran", {"PATH": tools.path, "QL_DATA_DIR": data_dir, "ID": "1",
                                          "QL_BASE_URL": _closed_url()})
    assert result.returncode == 0
    notes = [line for line in read_logs(data_dir).splitlines() if line.startswith("qlshadow:")]
    assert len(notes) == 2, notes
    for note, kind in zip(notes, ("running", "idle"), strict=True):
        assert note.startswith(f"qlshadow: {kind} callback not delivered: ")
        assert "qlshadow:" not in note[len("qlshadow:"):]
        assert not re.search(r"\b000\b", note)
        assert (transport + ":") in note or "exited" in note, note
        assert note.count(transport + ":") <= 1


def test_a_callback_refused_by_the_service_names_the_status(tmp_path, server):
    from shellenv import write_token
    data_dir = str(tmp_path / "data")
    write_token(data_dir, "t" * 43, int(time.time()) + 86400)
    tools = recorded_tools(str(tmp_path / "bin"), str(tmp_path / "argv.log"), "nc")
    run_task("dash", "true", {"PATH": tools.path, "QL_DATA_DIR": data_dir, "ID": "1",
                              "QL_BASE_URL": server.url})
    assert f"qlshadow: running callback not delivered: HTTP 401 from {server.url}/open/crons/status" \
        in read_logs(data_dir)


def test_task_logs_and_their_folders_are_private(server, tmp_path):
    data_dir = runner_data_dir(server, str(tmp_path / "data"))
    tools = recorded_tools(str(tmp_path / "bin"), str(tmp_path / "argv.log"), "curl")
    cron = create_cron(server)
    subprocess.run(["sh", "-c", "umask 022; exec \"$@\"", "sh", "env", "-i", f"PATH={tools.path}",
                    f"QL_DATA_DIR={data_dir}", f"ID={cron['id']}", "QL_LOG_NAME=private",
                    which("dash"), os.path.join(os.path.dirname(__file__), "..", "shell", "task.sh"),
                    f"umask > {tmp_path}/task.umask"], check=True)
    folder = os.path.join(data_dir, "log", "private")
    (name,) = os.listdir(folder)
    assert os.stat(os.path.join(data_dir, "log")).st_mode & 0o777 == 0o700
    assert os.stat(folder).st_mode & 0o777 == 0o700
    assert os.stat(os.path.join(folder, name)).st_mode & 0o777 == 0o600
    # The command keeps the umask it was started with.
    assert (tmp_path / "task.umask").read_text().strip() == "0022"
