"""`qlshadow adopt` (app/service/adopt.py): the box's own crontab lines become crons on request.

Every test reads and installs a real BusyBox spool (`busybox crontab -c DIR`), through an
install command that counts its runs, on both databases.
"""
from __future__ import annotations

import os
import shlex

import pytest

from qlshadow.service import adopt
from qlshadow.host import crontab
from qlshadow.storage import db
from qlshadow.errors import InvalidInput
from qlshadow.storage.models import Cron
from helpers import cli_env, run_cli, table_rows
from test_crontab_block import USER_CRONTAB, Target, block, busybox_target  # noqa: F401

# USER_CRONTAB's lines as numbered in the crontab: 1 SHELL=, 2 MAILTO=, 4 the reboot,
# 6 a look-alike of our lines, 7-9 another installation's block, 11 the weekly echo.
EXTRA = (b"@reboot /etc/init.d/late start\n@daily\t/usr/bin/backup --all\n"
         b"5/10 * * * * echo ambiguous\n0 1 * * * date +%F\n")
CRONTAB = USER_CRONTAB + EXTRA  # 12 @reboot, 13 @daily, 14 5/10, 15 the '%'


@pytest.fixture
def counted(busybox_target, tmp_path):  # noqa: F811
    """(target, installs()): busybox_target installed through a command that counts its runs."""
    count = tmp_path / "installs"
    inner = busybox_target.install.replace("{file}", '"$0"')
    target = Target(busybox_target.list,
                    f"sh -c {shlex.quote(f'echo x >> {count} && exec {inner}')} {{file}}")
    target.put(CRONTAB, tmp_path)
    count.unlink()
    return target, lambda: len(count.read_text().splitlines()) if count.exists() else 0


@pytest.fixture
def settings(app, make_settings, counted):
    target, _ = counted
    chosen = make_settings(QL_SCHEDULER="system", QL_CRONTAB_INSTALL=target.install,
                           QL_CRONTAB_LIST=target.list)
    app.extensions["qlshadow"] = chosen
    return chosen


def adopt_lines(settings, numbers, names=None):
    with db.database.connection_context():
        return adopt.adopt(settings, adopt.chosen(adopt.listing(settings), numbers), names)


def test_the_listing_numbers_the_user_s_lines_and_says_which_cannot_be_adopted(settings):
    listed = {line.number: line for line in adopt.listing(settings)}

    assert sorted(listed) == [1, 2, 4, 6, 11, 12, 13, 14, 15]  # no comment, blank or block line
    assert (listed[4].schedule, listed[4].command, listed[4].problem) == (
        "0 4 * * *", "/sbin/reboot", None)
    assert (listed[13].schedule, listed[13].command) == ("0 0 * * *", "/usr/bin/backup --all")
    assert listed[11].command == "echo 'weekly, 中文' >/dev/null 2>&1"
    assert "environment setting" in listed[1].problem and "environment" in listed[2].problem
    assert "@reboot" in listed[12].problem
    assert "ambiguous minute field" in listed[14].problem
    assert "'%'" in listed[15].problem


def test_two_adopted_lines_become_two_crons_and_leave_the_user_s_part_in_one_install(
        settings, counted):
    target, installs = counted

    adopted, outcome = adopt_lines(settings, [4, 13], ["reboot"])

    crons = table_rows(Cron, Cron.id)
    assert [(c["name"], c["schedule"], c["command"]) for c in crons] == [
        ("reboot", "0 4 * * *", "/sbin/reboot"),
        ("/usr/bin/backup --all", "0 0 * * *", "/usr/bin/backup --all")]
    assert [(line.number, cron["id"]) for line, cron in adopted] == [
        (4, crons[0]["id"]), (13, crons[1]["id"])]
    user = CRONTAB.replace(b"0 4 * * * /sbin/reboot\n", b"").replace(
        b"@daily\t/usr/bin/backup --all\n", b"")
    assert target.get() == user + block(settings)
    assert b" /sbin/reboot\n" in block(settings) and b"'/usr/bin/backup --all'\n" in block(settings)
    assert installs() == 1
    assert "installed qlshadow's block (2 active lines)" in outcome


def test_a_line_adopted_later_joins_the_block_the_first_one_made(settings, counted):
    target, installs = counted
    adopt_lines(settings, [4])
    weekly = next(line.number for line in adopt.listing(settings)
                  if line.command and line.command.startswith("echo 'weekly"))

    adopt_lines(settings, [weekly])

    user = CRONTAB.replace(b"0 4 * * * /sbin/reboot\n", b"").replace(
        "30 2 * * 0 echo 'weekly, 中文' >/dev/null 2>&1\n".encode(), b"")
    assert target.get() == user + block(settings)
    assert installs() == 2 and len(table_rows(Cron)) == 2


def test_of_two_identical_lines_adopting_one_leaves_the_other(settings, counted, tmp_path):
    target, installs = counted
    twice = b"0 4 * * * /sbin/reboot\n# between\n0 4 * * * /sbin/reboot\n"
    target.put(twice, tmp_path)

    adopt_lines(settings, [3])

    assert target.get() == b"0 4 * * * /sbin/reboot\n# between\n" + block(settings)
    assert len(table_rows(Cron)) == 1


@pytest.mark.parametrize("numbers, said", [
    ([99], "line 99 is not a job line"), ([3], "line 3 is not a job line"),
    ([8], "line 8 is not a job line"), ([2], "line 2 cannot be adopted: an environment setting"),
    ([4, 12], "line 12 cannot be adopted: @reboot"),
    ([14], "line 14 cannot be adopted: 'schedule'"), ([4, 4], "line 4 is named twice"),
])
def test_a_refused_line_writes_nothing(settings, counted, numbers, said):
    target, installs = counted

    with pytest.raises(InvalidInput, match=said):
        adopt_lines(settings, numbers)

    assert target.get() == CRONTAB
    assert installs() == 0 and table_rows(Cron) == []
    assert not os.path.exists(settings.crontab_file)


def test_a_line_changed_since_it_was_listed_is_refused_under_the_lock_and_nothing_is_written(
        settings, counted, tmp_path):
    target, installs = counted
    listed = adopt.chosen(adopt.listing(settings), [4, 11])
    changed = CRONTAB.replace(b"30 2 * * 0", b"30 3 * * 0")
    target.put(changed, tmp_path)
    before = installs()

    with db.database.connection_context(), pytest.raises(InvalidInput, match="line 11 changed"):
        adopt.adopt(settings, listed)

    assert target.get() == changed and installs() == before and table_rows(Cron) == []
    assert not os.path.exists(os.path.join(settings.data_dir, crontab.RUNNER_ENV))


def test_more_names_than_lines_are_refused(settings, counted):
    with pytest.raises(InvalidInput, match="at most one --name per line"):
        adopt_lines(settings, [4], ["a", "b"])
    assert counted[1]() == 0 and table_rows(Cron) == []


def test_adopt_needs_the_system_scheduler(app, make_settings, counted):
    node = make_settings(QL_SCHEDULER="node", QL_CRONTAB_LIST=counted[0].list)
    with pytest.raises(InvalidInput, match="QL_SCHEDULER=system"):
        adopt.listing(node)


def test_the_command_lists_adopts_and_prints_a_table_of_the_new_crons(settings, counted):
    env = {**cli_env(settings), "QL_CRONTAB_INSTALL": settings.crontab_install,
           "QL_CRONTAB_LIST": settings.crontab_list}

    listing = run_cli(env, "adopt").stdout
    assert "/sbin/reboot" in listing and "not: an environment setting" in listing
    result = run_cli(env, "adopt", "4", "--name", "nightly reboot")
    refused = run_cli(env, "adopt", "99", check=False)

    cron = table_rows(Cron)[0]
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows[0] == ["line", "id", "name", "schedule", "command"]
    assert rows[1] == ["4", str(cron["id"]), "nightly", "reboot", "0", "4", "*", "*", "*",
                       "/sbin/reboot"]
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "line 99 is not a job line" in refused.stderr
    assert b"0 4 * * * /sbin/reboot\n" not in counted[0].get().split(b"# BEGIN qlshadow")[0]
