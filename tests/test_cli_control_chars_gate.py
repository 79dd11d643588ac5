"""The gate's table (`qlshadow reconcile`) shows control characters of a cron's name
escaped, in its row and in the reasons that name the cron: an ESC sequence does not colour
the terminal and a line break does not split a row (app/cli/gate_report.py; both databases)."""
from __future__ import annotations

from helpers import cli_env, run_cli
from test_cli_control_chars import NAME, SHOWN


def test_a_control_character_in_a_name_is_escaped_in_the_gate_s_table(settings, make_cron):
    cron = make_cron(name=NAME)
    out = run_cli(cli_env(settings), "reconcile", check=False).stdout
    assert "\x1b" not in out
    lines = out.splitlines()
    assert lines[1].split()[:2] == ["cron", "name"]
    row = lines[2]
    assert row.split()[:2] == [str(cron["id"]), SHOWN[:23] + "~"]
    assert not any(line.startswith("fake row") for line in lines), out
    reasons = [line for line in lines if line.startswith("- ")]
    assert reasons and all("\\x1b[31mRED" in line for line in reasons if "esc" in line), out


def test_the_gate_s_reasons_show_the_whole_name_escaped():
    from qlshadow.cli.gate_report import format_report
    data = {"window": {"since": 0, "until": 60}, "gate": {"verdict": "fail", "failures": {},
            "reasons": [f"cron 1 ({NAME}) missed 1 firing"]}, "crons": []}
    assert format_report(data).splitlines()[-1] == f"- cron 1 ({SHOWN}) missed 1 firing"
