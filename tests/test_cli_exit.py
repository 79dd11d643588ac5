"""The command line's exit codes: an internal error (a defect) exits 70 with one line, never
a traceback and never 1; `token runner` beside an app that took the runner's name says so in
one line (both databases)."""
from __future__ import annotations

import pytest

from qlshadow.storage import db
from qlshadow.core.auth import RUNNER_APP, create_app_record
from qlshadow.cli import EXIT_INTERNAL, build_parser
from qlshadow.storage.models import App, Cron
from helpers import cli_env, run_cli, table_rows


def _one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_an_internal_error_exits_70_with_one_line(settings, make_cron):
    make_cron()
    # A row no version of qlshadow writes: reading it is a defect of the data, not of the
    # command line (2.x JSON cannot be produced from it).
    with db.connected(), db.write_transaction():
        Cron.update(extra_schedules="{not json").execute()

    result = run_cli(cli_env(settings), "cron", "list", check=False)

    assert result.returncode == EXIT_INTERNAL == 70
    line = _one_line(result)
    assert line.startswith("qlshadow: internal error (") and "report" in line


def test_the_exit_codes_are_in_the_help():
    text = build_parser().format_help()
    assert f"{EXIT_INTERNAL} an internal error" in text and "1 the command failed" in text


def test_a_usage_mistake_still_exits_2(settings):
    assert run_cli(cli_env(settings), "cron", "show", "0", check=False).returncode == 2


def test_token_runner_beside_an_app_with_the_runners_name_says_so_in_one_line(settings):
    with db.connected(), db.write_transaction():
        create_app_record(RUNNER_APP, ["crons", "runs"])

    result = run_cli(cli_env(settings), "token", "runner", check=False)

    assert result.returncode == 1
    line = _one_line(result)
    assert RUNNER_APP in line and "reserved" in line


@pytest.mark.parametrize("name", ["system", RUNNER_APP])
def test_app_create_refuses_qlshadows_own_app_names(settings, name):
    result = run_cli(cli_env(settings), "app", "create", name, check=False)

    assert result.returncode == 1
    assert "reserved" in _one_line(result)
    names = [row["name"] for row in table_rows(App)]
    assert names.count("system") == 1 and RUNNER_APP not in names
