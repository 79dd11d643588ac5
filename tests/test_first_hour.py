"""What a new user meets first: bad settings and unusable databases are one clear line on
stderr (never a traceback), and read-only commands create nothing and lock nothing."""
from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

from helpers import cli_env, run_cli


def _one_error_line(result) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("qlshadow: ")
    return lines[0]


def _env(tmp_path, **extra) -> dict:
    env = {"QL_DATA_DIR": str(tmp_path / "data"), "QL_SCHEDULER": "node",
           "QL_CRONTAB_INSTALL": "", "QL_PORT": "0"}
    env.update(extra)
    return env


@pytest.mark.parametrize("host", ["999.1.1.1", "1.2.3", "::zz"])
def test_an_invalid_ip_address_in_ql_host_is_one_line_naming_the_key(tmp_path, host):
    line = _one_error_line(run_cli(_env(tmp_path, QL_HOST=host), "serve", check=False))
    assert "QL_HOST" in line


def test_a_host_name_that_does_not_resolve_is_one_line_naming_the_key(tmp_path):
    line = _one_error_line(run_cli(_env(tmp_path, QL_HOST="no-such.invalid"), "serve",
                                   check=False))
    assert "QL_HOST" in line and "no-such.invalid" in line


def test_an_address_this_host_does_not_have_is_one_line(tmp_path):
    # TEST-NET-1 is never assigned to a local interface.
    line = _one_error_line(run_cli(_env(tmp_path, QL_HOST="192.0.2.1"), "serve", check=False))
    assert "cannot listen on 192.0.2.1" in line


def test_a_postgresql_url_without_its_driver_names_the_extra_to_install(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    # A module that refuses to import stands in for a missing driver.
    (blocker / "psycopg2.py").write_text("raise ImportError('no psycopg2 here')\n")
    env = _env(tmp_path, QL_DB_URL="postgresql://postgres@127.0.0.1:5432/postgres",
               PYTHONPATH=str(blocker))
    line = _one_error_line(run_cli(env, "db", "init", check=False))
    assert "pip install 'qlshadow[postgres]'" in line


def test_a_data_dir_that_is_a_file_is_one_line_naming_it(tmp_path):
    (tmp_path / "data").write_text("not a directory")
    line = _one_error_line(run_cli(_env(tmp_path), "db", "init", check=False))
    assert "QL_DATA_DIR" in line and "not a directory" in line


def test_a_data_dir_another_process_makes_meanwhile_is_taken(tmp_path, monkeypatch):
    # Several processes starting at once on a missing data dir: one makes it between
    # another's first look (no directory) and its second (something there).
    from qlshadow.storage.db import opening
    data = tmp_path / "data"
    isdir = os.path.isdir
    looks = []

    def first_look_misses_it(path):
        looks.append(path)
        if len(looks) == 1:
            data.mkdir()  # the other process, right after this one looked
            return False
        return isdir(path)

    monkeypatch.setattr(opening.os.path, "isdir", first_look_misses_it)
    opening._check_data_dir(str(data), create=True)
    assert isdir(data) and len(looks) >= 2


def test_a_sqlite_file_in_a_missing_directory_is_an_error_and_creates_nothing(tmp_path):
    url = f"sqlite:///{tmp_path}/missing/deeper/ql.db"
    line = _one_error_line(run_cli(_env(tmp_path, QL_DB_URL=url), "db", "init", check=False))
    assert f"{tmp_path}/missing/deeper" in line and "does not exist" in line
    assert not (tmp_path / "missing").exists()


@pytest.mark.skipif(not shutil.which("unshare") or os.geteuid() != 0,
                    reason="needs root and unshare to mount a read-only directory")
def test_a_data_dir_that_is_not_writable_is_one_line_naming_the_directory(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    env = dict(os.environ, **_env(tmp_path))
    env = {k: v for k, v in env.items() if not k.startswith("QL3_")}
    # Root writes anywhere, so the directory is made read-only by a private mount.
    script = (f"mount -t tmpfs -o ro tmpfs {data} && "
              f"exec {sys.executable} -m qlshadow.cli db init")
    result = subprocess.run(["unshare", "-m", "sh", "-c", script], env=env,
                            capture_output=True, text=True, timeout=60)
    line = _one_error_line(result)
    assert str(data) in line and "not writable" in line


def test_cron_rm_of_a_missing_cron_says_so_and_exits_1(app):
    env = cli_env(app.extensions["qlshadow"])
    line = _one_error_line(run_cli(env, "cron", "rm", "99", check=False))
    assert line == "qlshadow: Cron 99 does not exist."


def test_cron_disable_of_a_missing_cron_changes_nothing_and_exits_1(app, make_cron):
    cron = make_cron()
    env = cli_env(app.extensions["qlshadow"])
    _one_error_line(run_cli(env, "cron", "disable", str(cron["id"]), "99", check=False))
    shown = run_cli(env, "cron", "show", str(cron["id"]), "--json")
    assert '"isDisabled": 0' in shown.stdout


def test_a_read_only_command_on_a_missing_database_creates_no_file(tmp_path):
    env = _env(tmp_path)
    os.makedirs(env["QL_DATA_DIR"])
    line = _one_error_line(run_cli(env, "runs", check=False))
    assert "qlshadow db init" in line
    assert os.listdir(env["QL_DATA_DIR"]) == []


def test_read_only_commands_answer_while_another_process_holds_the_write_lock(app, make_cron,
                                                                             backend):
    make_cron()
    settings = app.extensions["qlshadow"]
    env = dict(cli_env(settings), QL_DB_TIMEOUT="1")
    if backend == "sqlite":
        holder = sqlite3.connect(settings.db_url[len("sqlite:///"):], isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
    else:
        import psycopg2
        holder = psycopg2.connect(settings.db_url)
        # What schema creation takes: a read-only command must not wait for it.
        holder.cursor().execute("BEGIN; SELECT pg_advisory_xact_lock(4460446)")
    try:
        # A command that waited for the lock would fail after QL_DB_TIMEOUT (SQLite) or
        # hang until run_cli's time limit (PostgreSQL).
        for args in (("runs",), ("accept-failures",), ("cron", "list"), ("crontab", "--print")):
            result = run_cli(env, *args, check=False)
            assert result.returncode == 0, (args, result.stderr)
    finally:
        holder.close()


def test_server_log_lines_carry_one_prefix():
    import logging

    from qlshadow.web.serving import _LogFormat
    fmt = _LogFormat()

    def line(name, level, message):
        return fmt.format(logging.LogRecord(name, level, __file__, 1, message, None, None))

    assert line("qlshadow", logging.WARNING, "crontab not updated: x") == \
        "qlshadow: warning: crontab not updated: x"
    assert line("qlshadow.core.shadow", logging.WARNING, "Shadow write failed") == \
        "qlshadow: warning: Shadow write failed"
    assert line("waitress", logging.ERROR, "socket error") == "qlshadow: error: waitress: socket error"
