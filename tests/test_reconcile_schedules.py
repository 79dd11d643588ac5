"""Which instants the gate expects crond to fire: steps, ranges, lists, day-of-month x
day-of-week, and DST changes, checked against a minute-by-minute model of BusyBox crond.

BusyBox crond wakes every minute and tests that minute's local time against the line; the
oracle below does the same with its own tiny field parser, independent of cronsim.
"""
from __future__ import annotations

import time

import pytest

from qlshadow.watch.firing_times import LocalClock, firings
from reconcile_history import local_zone

NAMES = {**{m: i for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)},
         **{d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}}


def _values(text: str, lo: int, hi: int) -> set:
    found = set()
    for part in text.split(","):
        base, _, step = part.partition("/")
        if base == "*":
            first, last = lo, hi
        else:
            a, _, b = base.partition("-")
            first = NAMES.get(a.lower(), None) if not a.isdigit() else int(a)
            last = (NAMES.get(b.lower()) if not b.isdigit() else int(b)) if b else (hi if step else first)
        found.update(range(first, last + 1, int(step or 1)))
    return found


def busybox_matches(schedule: str):
    """A predicate on struct_time, following BusyBox crond's parse and FixDayDow rule."""
    m, h, dom, mon, dow = schedule.split()
    minutes, hours = _values(m, 0, 59), _values(h, 0, 23)
    days, months = _values(dom, 1, 31), _values(mon, 1, 12)
    weekdays = {d % 7 for d in _values(dow, 0, 7)}
    all_days, all_weekdays = days == set(range(1, 32)), weekdays == set(range(7))
    if all_days != all_weekdays:  # only one restricted: the other is ignored
        days, weekdays = (set(), weekdays) if all_days else (days, set())

    def match(tm) -> bool:
        return (tm.tm_min in minutes and tm.tm_hour in hours and tm.tm_mon in months
                and (tm.tm_mday in days or (tm.tm_wday + 1) % 7 in weekdays))
    return match


def oracle(schedule: str, lo: int, hi: int) -> list:
    match = busybox_matches(schedule)
    return [t for t in range((lo + 59) // 60 * 60, hi, 60) if match(time.localtime(t))]


def expected(schedule: str, lo: int, hi: int) -> list:
    return firings(schedule, lo, hi, LocalClock(lo - 86400, hi + 86400))


def local(*fields) -> int:
    return int(time.mktime(tuple(fields) + (0,) * (6 - len(fields)) + (0, 0, -1)))


SCHEDULES = [
    "*/7 * * * *",            # a step that does not divide the hour
    "15-45/10 9-17 * * *",    # stepped range inside a range
    "0,20,45 8,12,20 * * *",  # lists
    "5 4 * * mon-fri",        # weekday range by name
    "0 12 1,15 * 5",          # day-of-month OR day-of-week (both restricted)
    "0 0 */2 * 1",            # '*/2' day-of-month with a weekday: BusyBox ORs them
    "0 0 1-31 * 1",           # a full day-of-month range is ignored: Mondays only
    "30 6 * jan-mar,oct 0,7",  # months by name; both spellings of Sunday
]


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_firings_match_busybox_crond_minute_by_minute_over_five_weeks(schedule):
    with local_zone("UTC"):
        lo, hi = local(2026, 2, 20, 0, 0), local(2026, 3, 27, 0, 0)
        assert expected(schedule, lo, hi) == oracle(schedule, lo, hi)


@pytest.mark.parametrize("schedule", ["30 2 * * *", "*/15 1-3 * * *", "0 * * * *",
                                      "59 1 * * 0", "0 3 * * *"])
@pytest.mark.parametrize("month", [3, 10])
def test_firings_across_a_berlin_dst_change_match_busybox_crond(schedule, month):
    with local_zone("Europe/Berlin"):
        lo, hi = local(2026, month, 25, 0, 0), local(2026, month, 31, 0, 0)
        assert expected(schedule, lo, hi) == oracle(schedule, lo, hi)


def test_a_time_in_the_spring_forward_gap_does_not_fire_that_night():
    with local_zone("Europe/Berlin"):
        # 29 March 2026: 02:00 CET jumps to 03:00 CEST.
        found = expected("30 2 * * *", local(2026, 3, 28, 12), local(2026, 3, 30, 12))
        assert [time.localtime(t)[:5] for t in found] == [(2026, 3, 30, 2, 30)]


def test_a_time_in_the_autumn_repeat_fires_twice_an_hour_apart():
    with local_zone("Europe/Berlin"):
        # 25 October 2026: 03:00 CEST falls back to 02:00 CET.
        found = expected("30 2 * * *", local(2026, 10, 24, 12), local(2026, 10, 25, 12))
        assert len(found) == 2 and found[1] - found[0] == 3600
        assert [time.localtime(t).tm_isdst for t in found] == [1, 0]


def test_a_zone_without_dst_maps_each_wall_minute_to_one_instant():
    with local_zone("Asia/Kolkata"):  # +05:30 all year
        lo = local(2026, 3, 1)
        found = expected("0 0 * * *", lo, lo + 3 * 86400)
        assert [t - lo for t in found] == [0, 86400, 2 * 86400]  # lo is included
