"""Text from cron fields in the CLI's tables shows its control characters escaped: a name
holding an ESC sequence and a line break neither colours the terminal nor splits a row
(app/cli/textout.py; `qlshadow cron list`, `cron show` and `status`, both databases)."""
from __future__ import annotations

import pytest

from helpers import cli_env, run_cli

NAME = "esc\x1b[31mRED\x1b[0m\nfake row"
SHOWN = "esc\\x1b[31mRED\\x1b[0m\\nfake row"


@pytest.fixture
def odd_cron(make_cron) -> dict:
    return make_cron(name=NAME)


@pytest.mark.parametrize("command", [("cron", "list"), ("status",)])
def test_a_control_character_in_a_name_is_escaped_in_the_table(settings, odd_cron, command):
    out = run_cli(cli_env(settings), *command).stdout
    assert "\x1b" not in out and SHOWN in out
    lines = out.splitlines()
    if command == ("status",):  # it ends with the open executions and the storage line
        assert lines.pop().startswith("storage: ")
        assert lines.pop().startswith("open executions: ")
    assert len(lines) == 2  # the titles and one row


def test_a_control_character_in_a_name_is_escaped_in_cron_show(settings, odd_cron):
    out = run_cli(cli_env(settings), "cron", "show", str(odd_cron["id"])).stdout
    assert "\x1b" not in out and SHOWN in out


def test_status_fits_its_table_to_the_terminal_like_every_other_table(settings, make_cron):
    make_cron(name="a" * 60)
    out = run_cli(cli_env(settings), "status").stdout
    titles, row, executions, storage = out.splitlines()
    assert executions.startswith("open executions: ") and storage.startswith("storage: ")
    assert titles.split()[:3] == ["cron", "name", "state"]
    assert "a" * 60 in row  # into a pipe nothing is cut


def test_every_control_character_is_escaped_and_nothing_else():
    from qlshadow.cli.textout import shown
    controls = "".join(map(chr, [*range(0x20), *range(0x7f, 0xa0)]))
    escaped = shown(controls)
    assert escaped.isascii() and escaped.isprintable()
    assert shown("\t\r\n") == "\\t\\r\\n" and shown("\x00\x7f\x9b") == "\\x00\\x7f\\x9b"
    assert shown("plain ascii, 名前, é, \\ and ~") == "plain ascii, 名前, é, \\ and ~"


def test_the_table_and_the_record_escape_their_cells():
    from qlshadow.cli.textout import Column, record, table
    assert table([Column("name")], [["a\nb"]]) == "name\na\\nb\n"
    assert record([("name", "a\x1bb")]) == "name: a\\x1bb\n"


@pytest.mark.parametrize("command", [("cron", "disable"), ("cron", "edit", "--alert-after", "2"),
                                     ("snooze", "--for", "1h")])
def test_a_control_character_in_a_name_is_escaped_in_what_a_change_prints(
        settings, odd_cron, command):
    words = list(command)
    if words[0] == "snooze":
        words = ["snooze", str(odd_cron["id"]), *words[1:]]
    else:
        words = [*words[:2], str(odd_cron["id"]), *words[2:]]
    result = run_cli(cli_env(settings), *words)
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and SHOWN in result.stdout
    assert len(result.stdout.splitlines()) == 1
