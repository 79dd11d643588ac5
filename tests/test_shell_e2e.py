"""From a cron made through the API to its Run: the rendered line, run exactly as crond would."""
from __future__ import annotations

import os
import subprocess

import pytest

from helpers import http
from shellenv import SYSTEM_PATH, cron_of, runs_of, which

MARKER = "QL_EXECUTION_ORIGIN=scheduled_system"


@pytest.fixture
def server(live_server):
    return live_server(QL_SCHEDULER="system", QL3_SHADOW_ORIGINS="scheduled_system")


def add_cron(server, command: str, schedule: str = "*/5 * * * *") -> dict:
    status, body = http("POST", f"{server.url}/open/crons",
                        {"name": "e2e job", "command": command, "schedule": schedule},
                        server.headers)
    assert status == 200, body
    return body["data"]


def active_commands(data_dir: str) -> list:
    """The command part of every active cron line of the crontab the server wrote (not the
    block's own notify line)."""
    with open(os.path.join(data_dir, "crontab.list"), encoding="utf-8") as fh:
        lines = [line for line in fh.read().splitlines()
                 if line and not line.startswith("#") and not line.endswith(" notify")]
    return [line.split(None, 5)[5] for line in lines]


def run_like_crond(command: str) -> subprocess.CompletedProcess:
    """What crond does with a line: /bin/sh -c, a bare environment, $HOME as cwd."""
    return subprocess.run([which("env"), "-i", f"PATH={SYSTEM_PATH}", "SHELL=/bin/sh",
                           "sh", "-c", command], cwd="/", capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("code", [0, 3])
def test_an_api_cron_run_from_its_crontab_line_is_one_exited_run_with_its_exit_code(
        server, make_settings, code):
    cron = add_cron(server, f"sleep 1; exit {code}")
    (command,) = active_commands(make_settings().data_dir)
    assert MARKER in command
    assert run_like_crond(command).returncode == code
    runs = runs_of(server, cron["id"])
    assert len(runs) == 1
    assert (runs[0]["state"], runs[0]["exit_code"]) == ("exited", code)


def test_the_legacy_cron_ends_idle_with_the_commands_duration(server, make_settings):
    cron = add_cron(server, "sleep 1")
    (command,) = active_commands(make_settings().data_dir)
    run_like_crond(command)
    after = cron_of(server, cron["id"])
    run = runs_of(server, cron["id"])[0]
    assert after["status"] == 1
    assert after["last_running_time"] >= 1
    assert after["last_execution_time"] == run["accepted_at"]
    assert after["log_path"] == run["attempt"]["log_path"]


def test_a_crontab_line_fetches_a_missing_token_under_the_bare_environment(
        server, make_settings):
    settings = make_settings()
    cron = add_cron(server, "exit 0")
    runner_token = os.path.join(settings.data_dir, "runner-token.json")
    os.unlink(runner_token)
    (command,) = active_commands(settings.data_dir)
    run_like_crond(command)
    assert os.path.exists(runner_token)
    assert runs_of(server, cron["id"])[0]["state"] == "exited"


def test_a_command_with_percent_and_newline_runs_exactly_as_written(
        server, make_settings, tmp_path):
    out = tmp_path / "out.txt"
    add_cron(server, f"printf '%s\\n' 'one 100%' > {out}\necho two >> {out}")
    (command,) = active_commands(make_settings().data_dir)
    run_like_crond(command)
    assert out.read_text() == "one 100%\ntwo\n"


def test_only_active_lines_carry_the_marker(server, make_settings):
    add_cron(server, "exit 0", schedule="@boot")
    add_cron(server, "exit 0", schedule="0 */5 * * * *")
    active = add_cron(server, "exit 0")
    with open(os.path.join(make_settings().data_dir, "crontab.list")) as fh:
        marked = [line for line in fh.read().splitlines() if MARKER in line]
    assert len(marked) == 1 and f"ID={active['id']} " in marked[0]
