"""Stored epoch seconds as text, for any 64-bit value on any time_t (no Flask).

The API stores times it cannot always show: on a router whose C library has a 32-bit
time_t, time.localtime() overflows past 2038-01-19 03:14:07 UTC, and on a 64-bit one past
the year 2**31. UTC is therefore computed from the epoch with integer arithmetic, and local
time falls back to that UTC text, marked "UTC", when the host cannot compute it.
"""
from __future__ import annotations

import functools
import time
from datetime import date, timedelta

DAY = 86400
# The Gregorian calendar repeats every four centuries (its leap rule's whole period), which
# are exactly this many days.
_CYCLE_YEARS = 4 * 100
_CYCLE_DAYS = 146097
_EPOCH = date(1970, 1, 1)
# The last second a gate window may reach (year 9000): cronsim's datetimes end with year
# 9999, and a yearly schedule needs room to find its next firing.
LOCAL_CAP = 221845391999


def utc_fields(seconds: int) -> tuple:
    """(year, month, day, hour, minute, second) of an epoch second in UTC, for any integer."""
    days, rest = divmod(int(seconds), DAY)
    # Shift into 1970..2369 (where datetime.date works) by whole cycles, then back.
    cycles, days = divmod(days, _CYCLE_DAYS)
    day = _EPOCH + timedelta(days=days)
    return (day.year + _CYCLE_YEARS * cycles, day.month, day.day,
            rest // 3600, rest // 60 % 60, rest % 60)


def utc_text(seconds: int, with_seconds: bool = True) -> str:
    """'YYYY-MM-DD HH:MM[:SS] UTC' for any integer epoch second."""
    year, month, day, hour, minute, second = utc_fields(seconds)
    text = f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}"
    return (f"{text}:{second:02d}" if with_seconds else text) + " UTC"


def local_text(seconds: int, with_seconds: bool = True, zone: bool = True) -> str:
    """Local 'YYYY-MM-DD HH:MM[:SS][ ZONE]', or utc_text() where the host has no local time."""
    pattern = "%Y-%m-%d %H:%M" + (":%S" if with_seconds else "") + (" %Z" if zone else "")
    try:
        return time.strftime(pattern, time.localtime(int(seconds)))
    except (OverflowError, OSError, ValueError):
        return utc_text(seconds, with_seconds)


def _has_local_time(seconds: int) -> bool:
    try:
        time.localtime(seconds)
    except (OverflowError, OSError, ValueError):
        return False
    return True


@functools.lru_cache(maxsize=1)
def local_limit() -> int:
    """The last epoch second this host turns into local time, at most LOCAL_CAP."""
    if _has_local_time(LOCAL_CAP):
        return LOCAL_CAP
    lo, hi = 0, LOCAL_CAP  # _has_local_time(lo) holds, _has_local_time(hi) does not
    if _has_local_time(2**31 - 1):
        lo = 2**31 - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _has_local_time(mid):
            lo = mid
        else:
            hi = mid
    return lo
