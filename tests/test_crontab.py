"""Crontab rendering (CONTRACT.md §11.1–§11.4): system vs node mode, comments, atomic writes,
installation."""
from __future__ import annotations

import os
import shlex
import subprocess

import pytest

from qlshadow.host import crontab
from qlshadow.storage import db
from helpers import cli_env, run_cli
from shellenv import busybox_static

MARKER = "QL_EXECUTION_ORIGIN=scheduled_system"


@pytest.fixture
def shadow_env() -> dict:
    """The app of this module runs in system mode (nothing is installed unless a test says)."""
    return {"QL_SCHEDULER": "system"}


def cron_lines(text: str) -> list:
    """The cron lines: after the header, before the block's own tick line (its tests are in
    test_alerts.py and test_tick.py; with no channel configured it is a comment)."""
    lines = text.splitlines()
    assert lines[-1] == crontab.NO_CHANNEL or lines[-1].endswith("/tick.sh")
    return lines[1:-1]


def render(settings) -> str:
    with db.database.connection_context():
        return crontab.render(settings)


def only_line(settings) -> str:
    lines = cron_lines(render(settings))
    assert len(lines) == 1, lines
    return lines[0]


def read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


# --- what each cron becomes --------------------------------------------------------------

def test_an_enabled_five_field_cron_is_an_active_line_with_the_marker(settings, make_cron):
    cron = make_cron(schedule="*/5 * * * *", command="task backup.sh")
    line = only_line(settings)
    assert line.startswith(f"*/5 * * * * ID={cron['id']} {MARKER} ")
    # An installed package renders its own copy of task.sh, a source checkout the tree's.
    task = os.path.join(crontab.shell_dir(), "task.sh")
    assert line.endswith(f"{task} 'task backup.sh'")


def test_a_disabled_cron_is_a_comment_without_the_marker(settings, make_cron, client, auth):
    cron = make_cron()
    assert client.put("/open/crons/disable", json=[cron["id"]], headers=auth).status_code == 200
    line = only_line(settings)
    assert line.startswith("# */5 * * * * ") and MARKER not in line


def test_a_six_field_cron_is_a_comment_without_the_marker(settings, make_cron):
    make_cron(schedule="30 */5 * * * *")
    line = only_line(settings)
    assert line.startswith("# 30 */5 * * * * ") and MARKER not in line


def test_a_cron_with_extra_schedules_is_a_comment_without_the_marker(settings, make_cron):
    make_cron(schedule="0 3 * * *", extra_schedules=[{"schedule": "0 15 * * *"}])
    line = only_line(settings)
    assert line.startswith("# 0 3 * * * ") and MARKER not in line


def test_an_empty_extra_schedules_list_keeps_the_line_active(settings, make_cron):
    make_cron(schedule="0 3 * * *", extra_schedules=[])
    assert MARKER in only_line(settings)


@pytest.mark.parametrize("schedule", ["@once", "@boot"])
def test_once_and_boot_crons_are_comments_without_the_marker(settings, make_cron, schedule):
    make_cron(schedule=schedule)
    line = only_line(settings)
    assert line.startswith(f"# {schedule} ") and MARKER not in line


def test_node_mode_writes_every_line_as_a_comment_without_the_marker(make_settings, make_cron):
    make_cron(schedule="*/5 * * * *")
    make_cron(schedule="@boot")
    text = render(make_settings(QL_SCHEDULER="node"))
    assert len(cron_lines(text)) == 2
    assert all(line.startswith("# ") for line in text.splitlines())
    assert MARKER not in text


def test_there_is_one_line_per_cron_in_id_order(settings, make_cron, client, auth):
    ids = [make_cron(name=f"job{i}")["id"] for i in range(3)]
    client.put("/open/crons", json={"id": ids[0], "name": "renamed"}, headers=auth)
    lines = cron_lines(render(settings))
    assert [line.split(" ID=")[1].split()[0] for line in lines] == [str(i) for i in ids]


def test_rendering_twice_gives_identical_bytes(settings, make_cron):
    make_cron(name="a")
    make_cron(name="b", schedule="@once")
    assert render(settings).encode() == render(settings).encode()


# --- what a line holds -------------------------------------------------------------------

def test_a_line_names_the_data_dir_by_absolute_path_and_nothing_else_of_the_service(
        make_settings, make_cron, tmp_path, monkeypatch):
    make_cron()
    monkeypatch.chdir(tmp_path)
    settings = make_settings(QL_SCHEDULER="system", QL_DATA_DIR="./rel-data",
                             QL_HOST="0.0.0.0", QL_PORT="5611")
    words = dict(word.split("=", 1) for word in shlex.split(only_line(settings))[5:]
                 if "=" in word and not word.startswith("/"))
    assert words["QL_DATA_DIR"] == str(tmp_path / "rel-data")
    assert not {"QL_BASE_URL", "QL_CLI", "QL_DB_URL", "QL_CONFIG"} & set(words)


def test_the_service_url_and_command_are_in_runner_env_readable_by_the_service_only(
        make_settings, make_cron, tmp_path, monkeypatch):
    make_cron()
    settings = make_settings(QL_SCHEDULER="system", QL_HOST="0.0.0.0", QL_PORT="5611")
    with db.database.connection_context():
        crontab.sync(settings)
    path = os.path.join(settings.data_dir, "runner.env")
    values = dict(line.split("=", 1) for line in read(path).splitlines())
    assert values["ql_base_url"] == "http://127.0.0.1:5611"
    assert os.access(shlex.split(values["ql_cli"])[0], os.X_OK)
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_a_command_with_percent_or_newline_stays_on_one_escaped_line(settings, make_cron):
    make_cron(command="date +%s\necho done")
    line = only_line(settings)
    assert "\n" not in line and "%" not in line
    assert "QL_ESCAPED=1" in line


def test_a_command_is_quoted_as_one_shell_word(settings, make_cron):
    make_cron(command="echo 'it''s' \"$HOME\"; exit 3")
    assert shlex.split(only_line(settings))[-1] == "echo 'it''s' \"$HOME\"; exit 3"
    assert "QL_ESCAPED" not in only_line(settings)


# --- writing and installing --------------------------------------------------------------

def test_the_file_is_replaced_by_a_rename_leaving_no_temp_files(settings, make_cron):
    make_cron(name="first")
    before = os.stat(settings.crontab_file).st_ino
    make_cron(name="second")
    assert os.stat(settings.crontab_file).st_ino != before
    assert not [n for n in os.listdir(os.path.dirname(settings.crontab_file)) if n.startswith(".crontab.")]
    assert read(settings.crontab_file) == render(settings)


@pytest.mark.parametrize("change", ["create", "update", "delete", "enable", "disable"])
def test_every_cron_change_through_the_api_rerenders_the_crontab(
        settings, make_cron, client, auth, change):
    cron = make_cron(name="kept", command="echo before")
    if change == "enable":
        client.put("/open/crons/disable", json=[cron["id"]], headers=auth)
    before = read(settings.crontab_file)
    requests = {
        "create": ("POST", "/open/crons", {"name": "new", "command": "echo new", "schedule": "@once"}),
        "update": ("PUT", "/open/crons", {"id": cron["id"], "command": "echo after"}),
        "delete": ("DELETE", "/open/crons", [cron["id"]]),
        "enable": ("PUT", "/open/crons/enable", [cron["id"]]),
        "disable": ("PUT", "/open/crons/disable", [cron["id"]]),
    }
    method, path, body = requests[change]
    assert client.open(path, method=method, json=body, headers=auth).status_code == 200
    after = read(settings.crontab_file)
    assert after != before
    assert after == render(settings)


@pytest.fixture
def spool(tmp_path):
    """A private BusyBox spool; its crontab's lock file goes with the test."""
    from test_crontab_block import Target, forget_lock
    path = tmp_path / "spool"
    path.mkdir()
    yield path
    bb = busybox_static()
    forget_lock(Target(f"{bb} crontab -c {path} -l", f"{bb} crontab -c {path} {{file}}"))


def test_busybox_crontab_installs_the_rendered_file(make_settings, make_cron, tmp_path, spool):
    bb = busybox_static()
    make_cron()
    # A space in the path: the file must reach crontab as one argument.
    settings = make_settings(QL_SCHEDULER="system", QL_CRONTAB_FILE=str(tmp_path / "a b" / "crontab.list"),
                             QL_CRONTAB_INSTALL=f"{bb} crontab -c {spool} {{file}}")
    crontab.sync(settings)
    listed = subprocess.run([bb, "crontab", "-c", str(spool), "-l"], capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    begin, end = crontab.markers(settings)
    assert listed.stdout == f"{begin}\n{read(settings.crontab_file)}{end}\n"
    assert MARKER in listed.stdout


@pytest.mark.parametrize("env", [{"QL_SCHEDULER": "node"},
                                 {"QL_SCHEDULER": "system", "QL_CRONTAB_INSTALL": ""}],
                         ids=["node-mode", "empty-install"])
def test_nothing_is_installed_in_node_mode_or_with_an_empty_install_command(
        make_settings, make_cron, tmp_path, env, spool):
    bb = busybox_static()
    make_cron()
    install = env.get("QL_CRONTAB_INSTALL", f"{bb} crontab -c {spool} {{file}}")
    settings = make_settings(**{**env, "QL_CRONTAB_INSTALL": install})
    crontab.sync(settings)
    assert os.path.exists(settings.crontab_file)
    assert os.listdir(spool) == []


def test_a_failed_install_refuses_the_change_with_503_and_logs_one_line(
        make_settings, client, auth, app, caplog):
    app.extensions["qlshadow"] = make_settings(QL_SCHEDULER="system", QL_CRONTAB_INSTALL="false {file}",
                                               QL_CRONTAB_LIST="")
    response = client.post("/open/crons", json={"name": "x", "command": "true", "schedule": "* * * * *"},
                           headers=auth)
    assert response.status_code == 503
    assert response.get_json()["message"].startswith(
        "The cron change was not made: installing the crontab failed")
    assert client.get("/open/crons", headers=auth).get_json()["data"]["total"] == 0
    warnings = [r.getMessage() for r in caplog.records if "cron change not made" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0] and "exited 1" in warnings[0]


def test_qlshadow_crontab_exits_non_zero_with_one_line_when_the_install_fails(settings, make_cron):
    make_cron()  # an active line: there is something to install
    env = dict(cli_env(settings), QL_SCHEDULER="system", QL_CRONTAB_INSTALL="false {file}",
               QL_CRONTAB_LIST="")
    result = run_cli(env, "crontab", check=False)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "installing the crontab failed" in result.stderr


def test_qlshadow_crontab_print_prints_without_writing(settings, make_cron):
    make_cron()
    os.unlink(settings.crontab_file)
    result = run_cli(cli_env(settings) | {"QL_SCHEDULER": "system"}, "crontab", "--print")
    assert result.stdout == render(settings)
    assert not os.path.exists(settings.crontab_file)
