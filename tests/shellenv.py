"""Helpers for running shell/task.sh for real: shells, bare environments, hidden tools.

Tools are hidden the way a small router lacks them: PATH is a folder of symlinks to only
the tools the script needs, and the kernel's UUID file is covered by a bind mount inside a
private mount namespace (`unshare -m`; the tests run as root).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHELL_DIR = os.path.join(ROOT, "shell")
TASK = os.path.join(SHELL_DIR, "task.sh")
SHELL_FILES = ("task.sh", "common.sh", "ql-task.sh")
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
KERNEL_UUID = "/proc/sys/kernel/random/uuid"

# The three shells the scripts must run under, as argv prefixes.
SHELLS = {"busybox": ("busybox", "sh"), "dash": ("dash",), "bash": ("bash",)}

# BusyBox with the crond and crontab applets: the variable, else CI's unpacked copy, else a
# busybox or a crond (a BusyBox link, as on OpenWrt and Alpine) found on PATH.
BUSYBOX_VARIABLE = "QL_TEST_BUSYBOX_STATIC"
BUSYBOX_CI_PATH = "/opt/qlshadow-ci/busybox-static/bin/busybox"
IN_CI = os.environ.get("QL_REQUIRE_POSTGRES") == "1" or os.environ.get("CI") == "true"

# What task.sh itself runs besides builtins.
BASE_TOOLS = ("date", "mkdir", "sleep")


def which(tool: str) -> str:
    """The absolute path of a system tool, found on crond's PATH (not the venv's)."""
    found = shutil.which(tool, path=SYSTEM_PATH)
    if not found:
        pytest.fail(f"{tool} is not installed (apt-get install -y busybox dash)")
    return found


def which_optional(tool: str) -> str:
    """Like which(), but a tool a box may lack (node) skips the test that needs it."""
    found = shutil.which(tool, path=SYSTEM_PATH)
    if not found:
        pytest.skip(f"{tool} is not installed on this machine")
    return found


def shell_argv(name: str) -> list:
    prefix = SHELLS[name]
    return [which(prefix[0]), *prefix[1:]]


def _has_cron_applets(path: str) -> bool:
    try:
        listed = subprocess.run([path, "--list"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    applets = set(listed.stdout.split())
    return listed.returncode == 0 and {"crond", "crontab"} <= applets


def _busybox_candidates() -> list:
    search = os.pathsep.join(filter(None, (os.environ.get("PATH"), SYSTEM_PATH)))
    found = [BUSYBOX_CI_PATH, shutil.which("busybox", path=search)]
    crond = shutil.which("crond", path=search)
    if crond:
        found.append(os.path.realpath(crond))  # crond -> busybox: the multi-call binary
    return [path for path in found if path and os.access(path, os.X_OK)]


_busybox_found: list = []


def busybox_static() -> str:
    """BusyBox with crond and crontab applets, or skip (fail in CI) saying how to get one."""
    if _busybox_found:
        return _busybox_found[0]
    chosen = os.environ.get(BUSYBOX_VARIABLE)
    if chosen:  # an explicit choice is used or reported, never replaced by a guess
        if os.access(chosen, os.X_OK) and _has_cron_applets(chosen):
            _busybox_found.append(chosen)
            return chosen
        reason = f"{BUSYBOX_VARIABLE}={chosen} is not a BusyBox with the crond and crontab applets"
    else:
        for path in _busybox_candidates():
            if _has_cron_applets(path):
                _busybox_found.append(path)
                return path
        reason = ("no BusyBox with the crond and crontab applets: not at " + BUSYBOX_CI_PATH
                  + ", and no such busybox or crond on PATH. Debian's busybox lacks them; "
                  "busybox-static has them: apt-get download busybox-static && dpkg-deb -x "
                  f"busybox-static_*.deb bbs, then {BUSYBOX_VARIABLE}=$PWD/bbs/bin/busybox "
                  "(see README, Tests)")
    if IN_CI:
        pytest.fail(reason + " — required in CI")
    pytest.skip(reason)


class ToolDir:
    """A PATH folder holding only the chosen tools (symlinks) and small fake programs."""

    def __init__(self, path: str, tools=BASE_TOOLS + ("curl",)):
        self.path = path
        os.makedirs(path, exist_ok=True)
        for tool in tools:
            self.link(tool)

    def link(self, name: str, target: str | None = None) -> None:
        os.symlink(target or which(name), os.path.join(self.path, name))

    def script(self, name: str, body: str) -> None:
        """A fake program: a /bin/sh script with this body."""
        path = os.path.join(self.path, name)
        with open(path, "w") as fh:
            fh.write("#!/bin/sh\n" + body + "\n")
        os.chmod(path, 0o755)

    def recorder(self, name: str, log: str) -> None:
        """name runs the real program, after noting in log that it was called."""
        self.script(name, f'echo {name} >> "{log}"\nexec {which_optional(name)} "$@"')


def task_argv(shell: str, command: str, env: dict, hide_kernel_uuid: str | None = None) -> list:
    """argv that runs task.sh under shell with exactly env (env -i), optionally with the
    kernel UUID file covered by the file hide_kernel_uuid in a private mount namespace."""
    argv = [which("env"), "-i", *(f"{k}={v}" for k, v in env.items()),
            *shell_argv(shell), TASK, command]
    if hide_kernel_uuid is None:
        return argv
    return [which("unshare"), "-m", which("sh"), "-c",
            f'mount --bind "$0" {KERNEL_UUID} && exec "$@"', hide_kernel_uuid, *argv]


def run_task(shell: str, command: str, env: dict, hide_kernel_uuid: str | None = None,
             timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(task_argv(shell, command, env, hide_kernel_uuid),
                          capture_output=True, text=True, timeout=timeout)


def cli_for_tests() -> str:
    from qlshadow.host.crontab import cli_command
    return cli_command()


def task_env(server, data_dir: str, cron_id: int | None, tools: ToolDir, marker: bool,
             **extra) -> dict:
    """The variables a crontab line gives task.sh, pointing at a live server."""
    env = {"PATH": tools.path, "SHELL": "/bin/sh", "QL_DATA_DIR": data_dir,
           "QL_BASE_URL": server.url, "QL_CLI": cli_for_tests(),
           "QL_DB_URL": server.db_url}
    if cron_id is not None:
        env["ID"] = str(cron_id)
    if marker:
        env["QL_EXECUTION_ORIGIN"] = "scheduled_system"
    env.update(extra)
    return env


def write_token(data_dir: str, value: str, expiration: int) -> str:
    """runner-token.json as `qlshadow token runner` writes it (what task.sh reads)."""
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, "runner-token.json")
    with open(path, "w") as fh:
        fh.write(json.dumps({"value": value, "expiration": expiration}) + "\n")
    return path


def fake_uuid() -> str:
    """A fresh valid lowercase v4 UUID (unique per test, so ids never collide)."""
    return str(uuid.uuid4())


def runs_of(server, cron_id: int) -> list:
    from helpers import http
    status, body = http("GET", f"{server.url}/open/runs?cron_id={cron_id}", headers=server.headers)
    assert status == 200, body
    return body["data"]


def instances_of(server, cron_id: int) -> list:
    from helpers import http
    status, body = http("GET", f"{server.url}/open/crons/{cron_id}/instances",
                        headers=server.headers)
    assert status == 200, body
    return body["data"]


def cron_of(server, cron_id: int) -> dict:
    from helpers import http
    status, body = http("GET", f"{server.url}/open/crons/{cron_id}", headers=server.headers)
    assert status == 200, body
    return body["data"]


def create_cron(server, command: str = "exit 0", schedule: str = "* * * * *", **extra) -> dict:
    from helpers import http
    body = {"name": f"job-{uuid.uuid4().hex[:6]}", "command": command, "schedule": schedule,
            **extra}
    status, answer = http("POST", f"{server.url}/open/crons", body, server.headers)
    assert status == 200, answer
    return answer["data"]


def read_logs(data_dir: str) -> str:
    """Every task log under data_dir/log, concatenated."""
    texts = []
    for folder, _, files in sorted(os.walk(os.path.join(data_dir, "log"))):
        for name in sorted(files):
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as fh:
                texts.append(fh.read())
    return "".join(texts)


def start_crond(bb: str, spool: str, log: str) -> subprocess.Popen:
    """BusyBox crond in the foreground on a private spool, with crond's own bare environment
    as on a router, in its own session (it outlives nothing of ours); stop it by its PID."""
    return subprocess.Popen([bb, "crond", "-f", "-c", spool, "-L", log, "-l", "5"],
                            env={"PATH": SYSTEM_PATH, "SHELL": "/bin/sh"},
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def wait_for(predicate, timeout: float = 20, interval: float = 0.1):
    """Poll predicate() until it returns something truthy; returns it, or the last falsy value."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = predicate()
    return value


class Server:
    """A live `qlshadow serve` for one module, with the database URL its tasks need."""

    def __init__(self, live, db_url: str, data_dir: str):
        self.live = live
        self.url = live.url
        self.token = live.token
        self.headers = live.headers
        self.db_url = db_url
        self.data_dir = data_dir

    def stop(self):
        self.live.stop()


def start_module_server(tmp_path_factory, backend: str, **env):
    """(Server, cleanup) on a fresh database of backend, shared by one test module."""
    from helpers import LiveServer, create_pg_database, drop_pg_database
    base = tmp_path_factory.mktemp(f"server-{backend}")
    data_dir = str(base / "data")
    os.makedirs(data_dir)
    dropped = None
    if backend == "sqlite":
        url = f"sqlite:///{base}/qlshadow.db"
    else:
        url, dropped = create_pg_database()
    full = {"QL_DATA_DIR": data_dir, "QL_DB_URL": url, "QL_SCHEDULER": "node",
            "QL_CRONTAB_INSTALL": "", "QL3_SHADOW_ORIGINS": "scheduled_system"}
    full.update(env)
    try:
        server = Server(LiveServer(full), url, data_dir)
    except BaseException:
        if dropped:
            drop_pg_database(dropped)
        raise

    def cleanup():
        server.stop()
        if dropped:
            drop_pg_database(dropped)
    return server, cleanup

