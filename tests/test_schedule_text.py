"""Schedules in words on the status page: the common forms, and nothing for the rest."""
from __future__ import annotations

import pytest

from qlshadow.web.overview import describe_schedule


@pytest.mark.parametrize("schedule, words", [
    ("* * * * *", "every minute"),
    ("*/5 * * * *", "every 5 minutes"),
    ("17 * * * *", "every hour at minute 17"),
    ("0 */6 * * *", "every 6 hours at minute 0"),
    ("30 2 * * *", "every day at 02:30"),
    ("0 9 * * 1-5", "on weekdays at 09:00"),
    ("15 4 * * 0", "every Sunday at 04:15"),
    ("15 4 * * sat", "every Saturday at 04:15"),
    ("0 0 1 * *", "on day 1 of every month at 00:00"),
    ("*/10 * * * * *", "every 10 seconds"),
    ("0 30 2 * * *", "every day at 02:30"),
    ("@once", "once, when added"),
    ("@boot", "at every boot"),
])
def test_a_common_schedule_is_put_in_words(schedule, words):
    assert describe_schedule(schedule) == words


@pytest.mark.parametrize("schedule", [
    "0 0 1 1 *", "1,31 * * * *", "0 8-18 * * *", "0 0 13 * 5", "5 */2 * * 1", "*/5 1 * * * *",
])
def test_an_unusual_schedule_gets_no_words_rather_than_wrong_ones(schedule):
    assert describe_schedule(schedule) is None
