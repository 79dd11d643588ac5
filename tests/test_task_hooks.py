"""A cron's work_dir, task_before and task_after: on its crontab line, in task.sh, in manual runs.

Rendering is checked on both databases; task.sh runs for real under BusyBox sh, dash and
bash (without a server when only the log and files matter); the crontab line is run
exactly as crond would, and a manual run is started, against a live server per backend.
"""
from __future__ import annotations

import os
import shlex
import subprocess

import pytest

from qlshadow.host import crontab
from qlshadow.storage import db
from qlshadow.host.crontab import shell_word
from helpers import BACKENDS, http
from shellenv import (SHELLS, SYSTEM_PATH, create_cron, instances_of, read_logs, run_task,
                      runs_of, start_module_server, wait_for, which)

MARKER = "QL_EXECUTION_ORIGIN=scheduled_system"
HOOK_VARS = ("QL_WORK_DIR", "QL_TASK_BEFORE", "QL_TASK_AFTER")


def line_words(line: str) -> dict:
    """The NAME=value words of a crontab line's command, split as sh would."""
    words = shlex.split(line.lstrip("# "))[5:]
    return dict(word.split("=", 1) for word in words if "=" in word and not word.startswith("/"))


def printf_b(text: str) -> str:
    """What task.sh's printf %b makes of an escaped value (trailing newlines aside)."""
    return subprocess.run([which("printf"), "%b", text], capture_output=True, text=True,
                          check=True).stdout


# --- rendering -----------------------------------------------------------------------------

@pytest.fixture
def shadow_env() -> dict:
    return {"QL_SCHEDULER": "system"}


def only_line(settings) -> str:
    with db.database.connection_context():
        lines = crontab.render(settings).splitlines()[1:-1]  # no notify line
    assert len(lines) == 1, lines
    return lines[0]


def test_a_cron_without_hooks_puts_none_of_their_variables_on_its_line(settings, make_cron):
    make_cron(work_dir="", task_before="  ", task_after=None)
    line = only_line(settings)
    assert not [name for name in HOOK_VARS if name in line]


def test_set_hooks_are_each_one_quoted_word_on_the_line(settings, make_cron):
    hooks = {"work_dir": "/srv/my jobs", "task_before": "echo 'it''s' \"$HOME\"",
             "task_after": "rm -f *.tmp; exit 0"}
    make_cron(**hooks)
    words = line_words(only_line(settings))
    assert (words["QL_WORK_DIR"], words["QL_TASK_BEFORE"], words["QL_TASK_AFTER"]) == (
        hooks["work_dir"], hooks["task_before"], hooks["task_after"])
    assert "QL_ESCAPED" not in words


def test_a_percent_or_line_break_in_a_hook_escapes_every_text_on_the_line(settings, make_cron):
    hooks = {"work_dir": "/srv/100%", "task_before": "date +%s\necho ready",
             "task_after": "echo done"}
    make_cron(command="echo 'a\\b'", **hooks)
    line = only_line(settings)
    assert "%" not in line and "\n" not in line
    words = line_words(line)
    assert words["QL_ESCAPED"] == "1"
    assert [printf_b(words[name]) for name in HOOK_VARS] == list(hooks.values())
    assert printf_b(shlex.split(line)[-1]) == "echo 'a\\b'"


def test_hooks_leave_the_marker_on_active_lines_only(settings, make_cron, client, auth):
    hooks = {"work_dir": "/tmp", "task_before": "true", "task_after": "true"}
    active = make_cron(**hooks)
    disabled = make_cron(**hooks)
    assert client.put("/open/crons/disable", json=[disabled["id"]], headers=auth).status_code == 200
    with db.database.connection_context():
        lines = crontab.render(settings).splitlines()[1:-1]  # no notify line
    assert lines[0].startswith(f"*/5 * * * * ID={active['id']} {MARKER} ")
    assert lines[1].startswith("# ") and MARKER not in lines[1]
    assert all("QL_TASK_BEFORE=true" in line for line in lines)


def test_a_line_with_hooks_renders_to_the_same_bytes_every_time(settings, make_cron):
    make_cron(work_dir="jobs", task_before="echo 50%", task_after="echo after")
    assert only_line(settings) == only_line(settings)


# --- task.sh under each shell, no server --------------------------------------------------

@pytest.fixture(params=list(SHELLS))
def shell(request) -> str:
    return request.param


@pytest.fixture
def data_dir(tmp_path) -> str:
    path = str(tmp_path / "data")
    os.makedirs(path)
    return path


def run_alone(shell: str, command: str, data_dir: str, **env) -> subprocess.CompletedProcess:
    """task.sh with no cron id (so no callbacks), crond's PATH and the given variables."""
    return run_task(shell, command, {"PATH": SYSTEM_PATH, "QL_DATA_DIR": data_dir, **env})


def test_task_before_the_command_and_task_after_run_in_that_order_in_work_dir(
        shell, data_dir, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    result = run_alone(shell, "pwd >> order; exit 3", data_dir, QL_WORK_DIR=str(work),
                       QL_TASK_BEFORE="echo before >> order", QL_TASK_AFTER="echo after >> order")
    assert result.returncode == 3
    assert (work / "order").read_text() == f"before\n{work}\nafter\n"


def test_a_relative_work_dir_is_taken_under_the_data_dir(shell, data_dir):
    os.makedirs(os.path.join(data_dir, "jobs", "nightly"))
    run_alone(shell, "pwd > here", data_dir, QL_WORK_DIR="jobs/nightly")
    with open(os.path.join(data_dir, "jobs", "nightly", "here")) as fh:
        assert fh.read() == os.path.join(data_dir, "jobs", "nightly") + "\n"


def test_escaped_hooks_and_work_dir_are_decoded_before_they_run(shell, data_dir, tmp_path):
    work = tmp_path / "100% done"
    work.mkdir()
    raw = {"QL_WORK_DIR": str(work), "QL_TASK_BEFORE": "printf '%s\\n' 'one 5%' >> out\necho two >> out",
           "QL_TASK_AFTER": "echo three >> out"}
    escaped = {name: shlex.split(shell_word(value, True))[0] for name, value in raw.items()}
    assert not any("%" in value or "\n" in value for value in escaped.values())
    run_alone(shell, "echo cmd >> out", data_dir, QL_ESCAPED="1", **escaped)
    assert (work / "out").read_text() == "one 5%\ntwo\ncmd\nthree\n"


def test_what_task_before_exports_or_sets_reaches_the_command_and_task_after(
        shell, data_dir, tmp_path):
    out = tmp_path / "out"
    run_alone(shell, f'echo "$A $B" >> {out}', data_dir, QL_TASK_BEFORE="export A=1; B=2",
              QL_TASK_AFTER=f'echo "$A $B" >> {out}')
    assert out.read_text() == "1 2\n1 2\n"


def test_a_failing_task_before_is_noted_and_the_command_still_runs(shell, data_dir, tmp_path):
    out = tmp_path / "out"
    result = run_alone(shell, f"echo ran > {out}", data_dir, QL_TASK_BEFORE="false")
    assert result.returncode == 0
    assert out.read_text() == "ran\n"
    assert "task_before exited 1; the command runs anyway" in read_logs(data_dir)


def test_an_exit_in_task_before_ends_the_run_with_its_code_and_a_log_line(
        shell, data_dir, tmp_path):
    out = tmp_path / "out"
    result = run_alone(shell, f"echo ran > {out}", data_dir, QL_TASK_BEFORE="exit 6",
                       QL_TASK_AFTER=f"echo after > {out}")
    assert result.returncode == 6
    assert not out.exists()
    assert "task_before called exit 6: the command did not run" in read_logs(data_dir)


def test_task_after_runs_after_a_failing_command_and_cannot_change_its_code(
        shell, data_dir, tmp_path):
    out = tmp_path / "out"
    result = run_alone(shell, "exit 4", data_dir, QL_TASK_AFTER=f"echo after > {out}; exit 0")
    assert result.returncode == 4
    assert out.read_text() == "after\n"


def test_a_failing_task_after_is_noted_and_the_command_code_stands(shell, data_dir):
    result = run_alone(shell, "exit 0", data_dir, QL_TASK_AFTER="exit 9")
    assert result.returncode == 0
    assert "task_after exited 9" in read_logs(data_dir)


def test_an_unusable_work_dir_runs_nothing_and_exits_1_with_one_log_line(
        shell, data_dir, tmp_path):
    out = tmp_path / "out"
    missing = tmp_path / "missing"
    result = run_alone(shell, f"echo ran > {out}", data_dir, QL_WORK_DIR=str(missing),
                       QL_TASK_BEFORE=f"echo before > {out}")
    assert result.returncode == 1
    assert not out.exists()
    notes = [line for line in read_logs(data_dir).splitlines() if str(missing) in line]
    assert notes == [f"qlshadow: work_dir {missing} cannot be entered "
                     "(missing, not a directory or not permitted): the task did not run"]


# --- against a live server: the crontab line as crond runs it, and manual runs ------------

@pytest.fixture(scope="module", params=BACKENDS)
def server(request, tmp_path_factory):
    srv, cleanup = start_module_server(tmp_path_factory, request.param, QL_SCHEDULER="system")
    yield srv
    cleanup()


def crontab_command(server, cron_id: int) -> str:
    """The command part of the cron's active line in the crontab the server wrote."""
    with open(os.path.join(server.data_dir, "crontab.list"), encoding="utf-8") as fh:
        (line,) = [text for text in fh.read().splitlines()
                   if not text.startswith("#") and f" ID={cron_id} " in text]
    return line.split(None, 5)[5]


def run_like_crond(command: str) -> subprocess.CompletedProcess:
    """What crond does with a line: /bin/sh -c, a bare environment, / as cwd."""
    return subprocess.run([which("env"), "-i", f"PATH={SYSTEM_PATH}", "SHELL=/bin/sh",
                           "sh", "-c", command], cwd="/", capture_output=True, text=True,
                          timeout=60)


def last_instance(server, cron_id: int) -> dict:
    instances = instances_of(server, cron_id)
    assert len(instances) == 1, instances
    return instances[0]


def test_a_crontab_line_runs_its_command_in_work_dir(server, tmp_path):
    cron = create_cron(server, "pwd > out.txt", work_dir=str(tmp_path))
    assert run_like_crond(crontab_command(server, cron["id"])).returncode == 0
    assert (tmp_path / "out.txt").read_text() == f"{tmp_path}\n"


def test_a_crontab_line_runs_task_before_the_command_and_task_after_in_order(server, tmp_path):
    cron = create_cron(server, "echo command >> order", work_dir=str(tmp_path),
                       task_before="echo before >> order", task_after="echo after >> order")
    run_like_crond(crontab_command(server, cron["id"]))
    assert (tmp_path / "order").read_text() == "before\ncommand\nafter\n"


@pytest.mark.parametrize("code", [0, 3])
def test_the_commands_exit_code_is_reported_and_returned_whatever_the_hooks_exit_with(
        server, tmp_path, code):
    cron = create_cron(server, f"exit {code}", work_dir=str(tmp_path),
                       task_before="exit_5() { return 5; }; exit_5", task_after="exit 9")
    assert run_like_crond(crontab_command(server, cron["id"])).returncode == code
    instance = last_instance(server, cron["id"])
    assert (instance["exit_code"], instance["finished_at"] is not None) == (code, True)
    (run,) = runs_of(server, cron["id"])
    assert (run["state"], run["exit_code"]) == ("exited", code)


def test_an_unusable_work_dir_exits_1_logs_why_and_still_sends_the_idle_callback(
        server, tmp_path):
    missing = tmp_path / "gone"
    cron = create_cron(server, "echo never", work_dir=str(missing))
    assert run_like_crond(crontab_command(server, cron["id"])).returncode == 1
    assert f"work_dir {missing} cannot be entered" in read_logs(server.data_dir)
    instance = last_instance(server, cron["id"])
    assert (instance["exit_code"], instance["status"]) == (1, 3)
    (run,) = runs_of(server, cron["id"])
    assert (run["state"], run["exit_code"]) == ("exited", 1)


def test_a_manual_run_honours_work_dir_and_both_hooks(server, tmp_path):
    cron = create_cron(server, "pwd >> order; exit 2", schedule="0 4 * * *",
                       work_dir=str(tmp_path), task_before="echo before >> order",
                       task_after="echo after >> order")
    assert http("PUT", f"{server.url}/open/crons/run", [cron["id"]], server.headers)[0] == 200
    instances = wait_for(lambda: [i for i in instances_of(server, cron["id"])
                                  if i["finished_at"] is not None])
    assert instances and instances[0]["exit_code"] == 2
    assert (tmp_path / "order").read_text() == f"before\n{tmp_path}\nafter\n"
    assert runs_of(server, cron["id"]) == []
