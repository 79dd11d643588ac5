"""Schedules: what is refused, and the crontab form every daemon reads alike (no database)."""
from __future__ import annotations

import pytest

from qlshadow.core.schedule import ScheduleError, check_schedule, crontab_fields


@pytest.mark.parametrize("schedule, fields", [
    ("* * * * 7", "* * * * 0"),
    ("* * * * 5-7", "* * * * 0,5,6"),
    ("* * * * 0-7", "* * * * *"),
    ("* * * * 7-7", "* * * * 0"),
    ("* * * * sun-sat", "* * * * *"),
    ("* * * * MON,Tue", "* * * * 1,2"),
    ("* * * * */2", "* * * * */2"),
    ("*/5 * * * *", "*/5 * * * *"),
    ("0-59/60 * * * *", "0 * * * *"),
    ("05 4 * jan-mar *", "5 4 * 1-3 *"),
    ("1,2,3,10 * * * *", "1-3,10 * * * *"),
    ("* * 1-31 * *", "* * * * *"),
], ids=lambda value: value)
def test_a_schedule_is_written_in_the_form_every_daemon_reads_alike(schedule, fields):
    assert crontab_fields(schedule) == fields


def test_a_day_of_month_step_names_its_days_explicitly():
    # BusyBox crond reads */2 there as the even days; Vixie cron and cronie as the odd.
    assert crontab_fields("0 0 */2 * *") == "0 0 1-31/2 * *"


def test_a_full_day_of_month_next_to_a_day_of_week_means_every_day():
    # Neither field starts with '*': Vixie runs on either; BusyBox would drop the full one.
    assert crontab_fields("0 0 1-31 * 3") == "0 0 * * *"


def test_a_full_day_of_week_next_to_a_starred_day_of_month_keeps_the_days_of_month():
    assert crontab_fields("0 0 */10 * 0-6") == "0 0 1-31/10 * *"


def test_two_listed_day_fields_stay_listed():
    assert crontab_fields("0 0 1,15 * 1") == "0 0 1,15 * 1"


@pytest.mark.parametrize("schedule, words", [
    ("5/10 * * * *", ("minute", "5-59/10")),
    ("* 3/2 * * *", ("hour", "3-23/2")),
    ("* * */2 * 1", ("day of week", "both vs. either")),
    ("* * 1 * */2", ("day of week", "both vs. either")),
    ("0 0 5-2 * *", ("day of month",)),
    ("* * * * 8", ("day of week",)),
    ("*/0 * * * *", ("minute",)),
    ("0 0 0 * *", ("day of month",)),
], ids=lambda value: value if isinstance(value, str) else None)
def test_a_schedule_no_daemon_reads_alike_is_refused_naming_the_field(schedule, words):
    with pytest.raises(ScheduleError) as caught:
        check_schedule(schedule)
    assert all(word in str(caught.value) for word in words), str(caught.value)


@pytest.mark.parametrize("schedule", [
    "0 0 30 2 *", "0 0 31 2 *", "0 0 31 4 *", "0 0 31 6,9,11 *", "0 0 30,31 2 *",
    "0 0 0 31 4 *", "0 0 30 2 0-6",
], ids=lambda value: value)
def test_a_schedule_that_never_fires_is_refused_naming_the_day_of_month(schedule):
    with pytest.raises(ScheduleError) as caught:
        check_schedule(schedule)
    assert "day of month" in str(caught.value) and "never run" in str(caught.value)


@pytest.mark.parametrize("schedule", [
    "0 0 29 2 *",      # leap years
    "0 0 31 4-5 *",    # May has a 31st
    "0 0 30 2 1",      # both day fields restricted: Mondays of February run
    "0 0 31 */2 *",
    "0 0 30 * *",
], ids=lambda value: value)
def test_a_schedule_that_fires_in_some_month_is_accepted(schedule):
    assert check_schedule(schedule) == schedule
