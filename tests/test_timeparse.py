"""The one parser of times and durations that every CLI option uses (qlshadow.cli.timeparse)."""
from __future__ import annotations

import calendar

import pytest

from qlshadow.cli.timeparse import TimeError, parse_duration, parse_time

# 2026-11-30 12:34:56 UTC, a Monday; in CST-8 it is 20:34:56 the same day.
NOW = calendar.timegm((2026, 11, 30, 12, 34, 56))


@pytest.fixture(autouse=True)
def china_time(box_zone):
    """The box's zone is UTC+8 with no DST."""
    box_zone("CST-8")


def utc(*fields) -> int:
    return calendar.timegm(fields + (0,) * (6 - len(fields)))


@pytest.mark.parametrize("text, expected", [
    ("30m", NOW - 1800), ("24h", NOW - 86400), ("7d", NOW - 7 * 86400), ("2w", NOW - 14 * 86400),
    ("90s", NOW - 90), ("0h", NOW), ("now", NOW), ("NOW", NOW),
    ("1764460800", 1764460800), ("0", 0),
])
def test_ages_words_and_epoch_seconds_are_read(text, expected):
    assert parse_time(text, "--since", now=NOW) == expected


def test_today_and_yesterday_are_local_midnights():
    assert parse_time("today", now=NOW) == utc(2026, 11, 29, 16)
    assert parse_time("yesterday", now=NOW) == utc(2026, 11, 28, 16)


def test_yesterday_on_the_first_of_a_month_is_the_last_day_of_the_one_before():
    first = utc(2026, 12, 1, 0, 30) - 8 * 3600  # 00:30 local on Dec 1
    assert parse_time("yesterday", now=first) == utc(2026, 11, 29, 16)


@pytest.mark.parametrize("text, expected", [
    ("2026-11-30", utc(2026, 11, 29, 16)),
    ("2026-11-30T04:00", utc(2026, 11, 29, 20)),
    ("2026-11-30 04:00:03", utc(2026, 11, 29, 20, 0, 3)),
    ("2026-11-30T04:00Z", utc(2026, 11, 30, 4)),
    ("2026-11-30T04:00:00+08:00", utc(2026, 11, 29, 20)),
    ("2026-11-30T04:00-0130", utc(2026, 11, 30, 5, 30)),
    ("2024-02-29", utc(2024, 2, 28, 16)),
])
def test_iso_dates_are_local_unless_they_name_a_zone(text, expected):
    assert parse_time(text, "--since", now=NOW) == expected


@pytest.mark.parametrize("text", [
    "", "foo", "-5", "1.5", "24x", "h", "7 d", "2026-13-01", "2026-02-30", "2025-02-29",
    "2026-11-30T24:00", "2026-11-30T04:60", "2026-11-30T04", "2026-11-30T04:00+25:00",
    "30/11/2026", "tomorrow", "99999999999", "3000-01-01", "١٢٣",
])
def test_anything_else_is_refused_naming_the_option(text):
    with pytest.raises(TimeError) as caught:
        parse_time(text, "--since", now=NOW)
    assert str(caught.value).startswith("--since: ")
    assert repr(text) in str(caught.value)


def test_a_bad_time_lists_what_is_accepted():
    with pytest.raises(TimeError, match="24h, 7d.*yesterday.*epoch seconds"):
        parse_time("last week", "--until", now=NOW)


@pytest.mark.parametrize("text, seconds", [("3600", 3600), ("30m", 1800), ("2h", 7200),
                                           ("1d", 86400), ("1w", 604800)])
def test_durations_are_seconds_or_a_number_and_a_unit(text, seconds):
    assert parse_duration(text, "--stuck-after") == seconds


@pytest.mark.parametrize("text", ["", "1.5h", "-1", "h", "1y", "2026-11-30"])
def test_a_bad_duration_is_refused_naming_the_option(text):
    with pytest.raises(TimeError, match="^--stuck-after: "):
        parse_duration(text, "--stuck-after")


# --- clock times (issue 35): local time, today unless the word says yesterday ---------------

@pytest.mark.parametrize("text, expected", [
    ("03:55", utc(2026, 11, 29, 19, 55)),             # 03:55 CST today (Nov 30)
    ("3:55", utc(2026, 11, 29, 19, 55)),
    ("03:55:10", utc(2026, 11, 29, 19, 55, 10)),
    ("00:00", utc(2026, 11, 29, 16)),
    ("23:59:59", utc(2026, 11, 30, 15, 59, 59)),       # later today: still today
    ("today 22:00", utc(2026, 11, 30, 14)),
    ("yesterday 22:00", utc(2026, 11, 29, 14)),
    ("Yesterday  22:00", utc(2026, 11, 29, 14)),
])
def test_clock_times_are_the_box_s_local_time_today_or_yesterday(text, expected):
    assert parse_time(text, "--since", now=NOW) == expected


def test_yesterday_at_a_clock_time_on_the_first_of_a_month():
    first = utc(2026, 12, 1, 0, 30) - 8 * 3600  # 00:30 local on Dec 1
    assert parse_time("yesterday 22:00", now=first) == utc(2026, 11, 30, 14)


@pytest.mark.parametrize("text", ["24:00", "03:60", "03:55:60", "3:5", "tomorrow 03:00",
                                  "yesterday 22", "22:00 yesterday", "03:55pm"])
def test_a_clock_time_out_of_range_or_in_another_form_is_refused(text):
    with pytest.raises(TimeError, match="^--since: .*03:55 \\(today\\)"):
        parse_time(text, "--since", now=NOW)


def test_the_cli_takes_a_clock_time_for_since(settings, box_zone):
    from helpers import cli_env, run_cli
    result = run_cli({**cli_env(settings), "TZ": "CST-8"}, "runs", "--since", "03:55",
                     "--until", "yesterday 22:00")
    assert result.returncode == 0, result.stderr
