"""The one parser of times and durations typed by a person (every CLI option that takes one).

A time is an age (`30m`, `24h`, `7d`, `2w`: that long before now), an ISO date or date
and time (`2026-11-30`, `2026-11-30T04:00`, `2026-11-30 04:00:03+08:00`, `...Z`; without
a zone it is the box's local time, a date alone its local midnight), `today`,
`yesterday`, `now`, a clock time (`03:55`, `03:55:10`: today, local time; `today 22:00`,
`yesterday 22:00`), or epoch seconds. Errors name the option and list what is accepted.
"""
from __future__ import annotations

import calendar
import re
import time

UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# Bounds that every platform's time functions handle (32-bit time_t included).
MAX_SECONDS = 2**31 - 1
_AGE = re.compile(r"([0-9]{1,9})([smhdw])")
_ISO = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
                  r"(?:[T ]([0-9]{2}):([0-9]{2})(?::([0-9]{2}))?)?"
                  r"(Z|[+-][0-9]{2}:?[0-9]{2})?")
# A clock time, alone (today) or after `today` or `yesterday`: the box's local time.
_CLOCK = re.compile(r"(?:(today|yesterday)\s+)?([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?")
ACCEPTED = ("30m, 24h, 7d, 2w, 2026-11-30, 2026-11-30T04:00[:SS][Z|+08:00], today, "
            "yesterday, 03:55 (today), yesterday 22:00, now or epoch seconds")


class TimeError(ValueError):
    """A time or duration that cannot be read; str() is one sentence naming the option."""


def _named(option: str) -> str:
    return f"{option}: " if option else ""


def parse_duration(text: str, option: str = "") -> int:
    """Seconds of `90`, `30m`, `24h`, `7d` or `2w`, else TimeError (naming option)."""
    text = text.strip()
    if text.isascii() and text.isdigit() and len(text) <= 10:
        return int(text)
    match = _AGE.fullmatch(text)
    if not match:
        raise TimeError(f"{_named(option)}{text!r} is not a duration; "
                        "use seconds or 30m, 24h, 7d, 2w.")
    return int(match.group(1)) * UNIT_SECONDS[match.group(2)]


def parse_time(text: str, option: str = "", now: float | None = None) -> int:
    """Epoch seconds of a time as the module describes, else TimeError (naming option)."""
    now = time.time() if now is None else now
    raw = text.strip()
    word = raw.lower()
    try:
        if word == "now":
            return int(now)
        if word in ("today", "yesterday"):
            return _local_day(now, word == "yesterday", 0, 0, 0)
        clock = _CLOCK.fullmatch(word)
        if clock:
            seconds = _clock(now, clock)
        elif raw.isascii() and raw.isdigit() and len(raw) <= 10:
            seconds = int(raw)
        elif _AGE.fullmatch(word):
            seconds = int(now) - parse_duration(word, option)
        else:
            seconds = _iso(raw)
    except (OverflowError, ValueError) as exc:
        if isinstance(exc, TimeError):
            raise
        raise TimeError(f"{_named(option)}{text!r} is out of range.") from None
    if seconds is None:
        raise TimeError(f"{_named(option)}{text!r} is not a time; use {ACCEPTED}.")
    if not 0 <= seconds <= MAX_SECONDS:
        raise TimeError(f"{_named(option)}{text!r} is out of range (1970 to 2038).")
    return seconds


def _local_day(now: float, yesterday: bool, hour: int, minute: int, second: int) -> int:
    """Epoch seconds of this clock time on the local day of now (or the day before)."""
    day = time.localtime(now)
    fields = (day.tm_year, day.tm_mon, day.tm_mday - yesterday, hour, minute, second, 0, 0, -1)
    return int(time.mktime(fields))  # mktime normalises day 0 to the month before


def _clock(now: float, match) -> int | None:
    """Epoch seconds of `03:55`, `today 03:55` or `yesterday 22:00:10`, or None."""
    hour, minute, second = (int(g or 0) for g in match.groups()[1:])
    if hour > 23 or minute > 59 or second > 59:
        return None
    return _local_day(now, match.group(1) == "yesterday", hour, minute, second)


def _iso(text: str) -> int | None:
    """Epoch seconds of an ISO date or date and time, or None when it is not one."""
    match = _ISO.fullmatch(text)
    if not match:
        return None
    year, month, day, hour, minute, second = (int(g or 0) for g in match.groups()[:6])
    zone = match.group(7)
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1]
            and hour <= 23 and minute <= 59 and second <= 59):
        return None
    fields = (year, month, day, hour, minute, second)
    if zone is None:
        return int(time.mktime(fields + (0, 0, -1)))
    offset = 0
    if zone != "Z":
        digits = zone[1:].replace(":", "")
        hours, minutes = int(digits[:2]), int(digits[2:])
        if hours > 23 or minutes > 59:
            return None
        offset = (hours * 3600 + minutes * 60) * (1 if zone[0] == "+" else -1)
    return calendar.timegm(fields) - offset
