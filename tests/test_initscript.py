"""Init scripts (CONTRACT.md §14): the SysV script started and stopped for real under BusyBox ash,
dash and bash, with and without start-stop-daemon; the systemd unit. The procd script has
tests/test_procd.py."""
from __future__ import annotations

import configparser
import os
import shutil
import signal
import subprocess
import sys

import pytest

from helpers import ROOT, free_port, http

SYSV = os.path.join(ROOT, "conf", "qlshadow.sysv")
PROCD = os.path.join(ROOT, "conf", "qlshadow.init")
UNIT = os.path.join(ROOT, "conf", "qlshadow.service")
SHELLS = {"busybox": ["busybox", "sh"], "dash": ["dash"], "bash": ["bash"]}
QLSHADOW = os.path.join(os.path.dirname(sys.executable), "qlshadow")


def cmdline(pid: int) -> list:
    """The arguments of a live process; [] when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode() for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


class SysV:
    """The SysV script with a temp config, data dir, pid file and log, on a free port."""

    def __init__(self, tmp_path, shell="busybox", use_ssd=True):
        self.shell = SHELLS[shell]
        self.conf = tmp_path / "qlshadow.conf"
        self.pidfile = tmp_path / "run" / "qlshadow.pid"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
        self.env.update(QLSHADOW_BIN=QLSHADOW, QL_CONFIG=str(self.conf),
                        QLSHADOW_PIDFILE=str(self.pidfile), QLSHADOW_LOG=str(tmp_path / "qlshadow.log"),
                        QLSHADOW_DEFAULTS="/dev/null", QLSHADOW_NO_SSD="0" if use_ssd else "1")

    def write_conf(self, **extra) -> None:
        lines = {"QL_DATA_DIR": str(self.conf.parent / "data"), "QL_HOST": "127.0.0.1",
                 "QL_PORT": str(self.port), "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": ""}
        lines.update(extra)
        self.conf.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))

    def run(self, action: str) -> subprocess.CompletedProcess:
        return subprocess.run([*self.shell, SYSV, action], env=self.env, capture_output=True,
                              text=True, timeout=60)

    def pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None

    def ours(self) -> list:
        """PIDs of live processes serving with this config."""
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                args = cmdline(int(entry))
                if "serve" in args and str(self.conf) in args:
                    found.append(int(entry))
        return found

    def cleanup(self) -> None:
        self.run("stop")
        for pid in self.ours():  # only ever our own service, found by its config path
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def sysv(tmp_path):
    services = []

    def make(**kwargs) -> SysV:
        service = SysV(tmp_path / f"s{len(services)}", **kwargs)
        service.conf.parent.mkdir()
        service.write_conf()
        services.append(service)
        return service

    yield make
    for service in services:
        service.cleanup()


@pytest.fixture
def unrelated_process():
    """A live process that is not ours (a sleep), killed by its PID afterwards."""
    process = subprocess.Popen(["sleep", "300"])
    yield process
    process.kill()
    process.wait()


MODES = [(shell, ssd) for shell in SHELLS for ssd in (True, False)]
MODE_IDS = [f"{shell}-{'ssd' if ssd else 'plain'}" for shell, ssd in MODES]


# --- SysV: start, status, stop ----------------------------------------------------------------

@pytest.mark.parametrize("shell,use_ssd", MODES, ids=MODE_IDS)
def test_start_serves_health_and_status_says_running(sysv, shell, use_ssd):
    if use_ssd and not shutil.which("start-stop-daemon"):
        pytest.skip("start-stop-daemon is not installed")
    service = sysv(shell=shell, use_ssd=use_ssd)

    started = service.run("start")
    status, body = http("GET", service.url + "/health")
    state = service.run("status")

    assert started.returncode == 0, started.stdout + started.stderr
    assert status == 200 and body["data"]["status"] == "ok"
    assert state.returncode == 0
    assert f"running (pid {service.pid()})" in state.stdout
    assert service.ours() == [service.pid()]


@pytest.mark.parametrize("shell,use_ssd", MODES, ids=MODE_IDS)
def test_stop_ends_the_process_and_status_says_not_running(sysv, shell, use_ssd):
    if use_ssd and not shutil.which("start-stop-daemon"):
        pytest.skip("start-stop-daemon is not installed")
    service = sysv(shell=shell, use_ssd=use_ssd)
    assert service.run("start").returncode == 0
    pid = service.pid()

    stopped = service.run("stop")
    state = service.run("status")

    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert cmdline(pid) == []
    assert not service.pidfile.exists()
    assert state.returncode == 3, state.stdout


def test_status_without_a_pid_file_is_3(sysv):
    service = sysv()

    state = service.run("status")

    assert state.returncode == 3
    assert "not running" in state.stdout


def test_starting_twice_keeps_one_process(sysv):
    service = sysv()
    assert service.run("start").returncode == 0
    first = service.pid()

    again = service.run("start")

    assert again.returncode == 0
    assert "already running" in again.stdout
    assert service.pid() == first
    assert service.ours() == [first]


def test_restart_replaces_the_process(sysv):
    service = sysv()
    assert service.run("start").returncode == 0
    first = service.pid()

    restarted = service.run("restart")

    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert service.ours() == [service.pid()] and service.pid() != first
    assert http("GET", service.url + "/health")[0] == 200


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_a_pid_file_of_a_dead_process_makes_status_1(sysv):
    service = sysv()
    service.pidfile.parent.mkdir()
    service.pidfile.write_text(f"{dead_pid()}\n")

    state = service.run("status")

    assert state.returncode == 1
    assert "dead" in state.stdout


def test_start_replaces_a_pid_file_of_a_dead_process(sysv):
    service = sysv()
    service.pidfile.parent.mkdir()
    stale = dead_pid()
    service.pidfile.write_text(f"{stale}\n")

    started = service.run("start")

    assert started.returncode == 0, started.stdout + started.stderr
    assert "stale pid file" in started.stdout
    assert service.pid() != stale and service.ours() == [service.pid()]
    assert http("GET", service.url + "/health")[0] == 200


def test_a_pid_file_naming_an_unrelated_process_makes_status_1(sysv, unrelated_process):
    service = sysv()
    service.pidfile.parent.mkdir()
    service.pidfile.write_text(f"{unrelated_process.pid}\n")

    state = service.run("status")

    assert state.returncode == 1


def test_stop_never_signals_an_unrelated_process_named_in_the_pid_file(sysv, unrelated_process):
    service = sysv()
    service.pidfile.parent.mkdir()
    service.pidfile.write_text(f"{unrelated_process.pid}\n")

    stopped = service.run("stop")

    assert stopped.returncode == 0
    assert unrelated_process.poll() is None
    assert not service.pidfile.exists()


def test_start_replaces_a_pid_file_naming_an_unrelated_process(sysv, unrelated_process):
    service = sysv()
    service.pidfile.parent.mkdir()
    service.pidfile.write_text(f"{unrelated_process.pid}\n")

    started = service.run("start")

    assert started.returncode == 0, started.stdout + started.stderr
    assert service.pid() != unrelated_process.pid
    assert service.ours() == [service.pid()]
    assert unrelated_process.poll() is None


def test_start_with_a_bad_config_fails_with_the_services_message(sysv):
    service = sysv()
    service.write_conf(QL_PORT="not-a-port")

    started = service.run("start")

    assert started.returncode == 1
    assert "QL_PORT" in started.stderr
    assert not service.pidfile.exists()
    assert service.ours() == []


def test_an_unknown_action_prints_usage_and_exits_2(sysv):
    service = sysv()

    result = service.run("bounce")

    assert result.returncode == 2
    assert "Usage:" in result.stderr


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("script", [SYSV, PROCD])
def test_the_init_scripts_parse_under_every_shell(shell, script):
    result = subprocess.run([*SHELLS[shell], "-n", script], capture_output=True, text=True)

    assert result.returncode == 0, result.stderr


# --- systemd ---------------------------------------------------------------------------------

def test_the_systemd_unit_serves_with_the_conf_file_and_restarts_on_failure():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read(UNIT)

    exec_start = unit["Service"]["ExecStart"].split()
    assert exec_start[1:] == ["--config", "/etc/qlshadow/qlshadow.conf", "serve"]
    assert exec_start[0].endswith("/qlshadow") and exec_start[0].startswith("/")
    assert unit["Service"]["Restart"] == "on-failure"
    assert unit["Install"]["WantedBy"] == "multi-user.target"
