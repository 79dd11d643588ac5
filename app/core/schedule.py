"""Cron schedules: validation, and the one form every cron daemon reads the same way.

A schedule is 5 fields, 6 fields (leading seconds), or @once / @boot. BusyBox crond,
Debian's Vixie cron and cronie disagree on parts of the syntax (measured; see
docs/INSTALL.md), so a crontab line never carries the text as written: `crontab_fields`
expands each field to its set of values and writes that set back in a form all of them
parse identically. What no form can say on every daemon, and a schedule that would never
run (a day of month no listed month has), is refused here, naming the field.
"""
from __future__ import annotations

import itertools

SPECIAL = ("@once", "@boot")
_MONTHS = {m: i for i, m in enumerate(
    "jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}
_DAYS = {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}
# (name, low, high, names) for minute-first schedules; day of week 7 is Sunday (0).
_FIELDS = (("minute", 0, 59, None), ("hour", 0, 23, None), ("day of month", 1, 31, None),
           ("month", 1, 12, _MONTHS), ("day of week", 0, 7, _DAYS))
_SECONDS = ("second", 0, 59, None)
# The most days each month has (February: 29, leap years).
_MONTH_DAYS = dict(zip(range(1, 13), (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31),
                       strict=True))


class ScheduleError(ValueError):
    """A schedule that cannot be used; the message names the field and says why."""


def _value(text: str, lo: int, hi: int, names) -> int:
    if names and text.lower() in names:
        return names[text.lower()]
    if not text.isascii() or not text.isdigit():
        raise ValueError
    number = int(text)
    if not lo <= number <= hi:
        raise ValueError
    return number


def _expand(text: str, lo: int, hi: int, names) -> set:
    """The values a field selects; ValueError when it is not valid cron syntax."""
    values = set()
    for part in text.split(","):
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isascii() or not step_text.isdigit() or int(step_text) == 0:
                raise ValueError
            step = int(step_text)
        if base == "*":
            first, last = lo, hi
        else:
            start, dash, end = base.partition("-")
            first = _value(start, lo, hi, names)
            last = _value(end, lo, hi, names) if dash else first
            if last < first:
                raise ValueError
            if slash and not dash:
                # "5/10" is every 10 minutes from 5 to cronie, minute 5 to BusyBox crond,
                # and an error to Debian's crontab: no one meaning to keep.
                raise _Ambiguous(f"'{part}' means different things to different cron daemons; "
                                 f"write {start}-{hi}/{step} (every {step} from {start}) "
                                 f"or {start}")
        values.update(range(first, last + 1, step))
    return values


class _Ambiguous(ValueError):
    pass


def _parse(schedule) -> tuple:
    """(fields as written, value sets of the minute-first fields) or ScheduleError."""
    if not isinstance(schedule, str):
        raise ScheduleError("the schedule must be a string")
    fields = schedule.split()
    if len(fields) == 1 and fields[0] in SPECIAL:
        return fields, None
    specs = {5: _FIELDS, 6: (_SECONDS,) + _FIELDS}.get(len(fields))
    if specs is None:
        raise ScheduleError(f"schedule {schedule!r} must have 5 or 6 fields, or be @once or @boot")
    sets = []
    for text, (name, lo, hi, names) in zip(fields, specs, strict=True):
        try:
            sets.append(_expand(text, lo, hi, names))
        except _Ambiguous as exc:
            raise ScheduleError(f"schedule {schedule!r} has an ambiguous {name} field: {exc}") from None
        except ValueError:
            raise ScheduleError(f"schedule {schedule!r} has an invalid {name} field {text!r}") from None
    sets = sets[-5:]
    sets[4] = {0 if day == 7 else day for day in sets[4]}
    dom_text, dow_text = fields[-3], fields[-1]
    dom_full, dow_full = len(sets[2]) == 31, len(sets[4]) == 7
    if (not dom_full and not dow_full
            and (dom_text.startswith("*") or dow_text.startswith("*"))):
        # Vixie cron and cronie run such a line on days matching both fields, BusyBox crond
        # on days matching either: no crontab line means the same to all of them.
        raise ScheduleError(
            f"schedule {schedule!r} restricts both day of month ({dom_text!r}) and day of week "
            f"({dow_text!r}) with one of them starting with '*', which cron daemons read "
            "differently (both vs. either); list the days explicitly or leave one field '*'")
    if not dom_full and dow_full and not any(
            day <= _MONTH_DAYS[month] for month in sets[3] for day in sets[2]):
        # The day of week adds no day (every value), so the day of month alone decides,
        # and no listed month has one of its days: the line would never run.
        raise ScheduleError(
            f"schedule {schedule!r} has a day of month field {dom_text!r} that no month in "
            f"its month field {fields[-2]!r} has, so it would never run")
    return fields, sets


def check_schedule(schedule) -> str:
    """Return the schedule normalised to single spaces, or raise ScheduleError naming the field."""
    return " ".join(_parse(schedule)[0])


def _field_text(values: set, lo: int, hi: int, star_step: bool = True) -> str:
    """A set of values as cron text that BusyBox, Vixie and cronie all read the same way.

    Only plain numbers, a-b ranges, a-b/s steps, and */s outside the day of month:
    BusyBox crond reads '*/2' there as the even days, the others as the odd ones.
    """
    if values == set(range(lo, hi + 1)):
        return "*"
    ordered = sorted(values)
    if len(ordered) >= 3:
        step = ordered[1] - ordered[0]
        if all(b - a == step for a, b in itertools.pairwise(ordered)):
            if star_step and step > 1 and ordered[0] == lo and ordered[-1] + step > hi:
                return f"*/{step}"
            return f"{ordered[0]}-{ordered[-1]}" if step == 1 else f"{ordered[0]}-{ordered[-1]}/{step}"
    parts, run = [], [ordered[0]]
    for value in ordered[1:]:
        if value == run[-1] + 1:
            run.append(value)
            continue
        parts.append(run)
        run = [value]
    parts.append(run)
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" if len(r) > 2
                    else f"{r[0]},{r[1]}" for r in parts)


def crontab_fields(schedule: str) -> str:
    """The five fields of a 5-field schedule as written on a crontab line (see module doc)."""
    fields, sets = _parse(schedule)
    if sets is None or len(fields) != 5:
        raise ScheduleError(f"schedule {schedule!r} has no crontab form")
    minute, hour, dom, month, dow = sets
    if len(dom) == 31 or len(dow) == 7:
        # Neither day field starts with '*' here, so every daemon runs on days matching
        # either field; one of them covers every day.
        if not fields[2].startswith("*") and not fields[4].startswith("*"):
            dom, dow = set(range(1, 32)), set(range(7))
    return " ".join((_field_text(minute, 0, 59), _field_text(hour, 0, 23),
                     _field_text(dom, 1, 31, star_step=False), _field_text(month, 1, 12),
                     _field_text(dow, 0, 6)))


def field_count(schedule: str) -> int:
    """5 or 6 for field schedules, 0 for @once/@boot."""
    return 0 if schedule in SPECIAL else len(schedule.split())


# --- quiet hours: "HH:MM-HH:MM" in the box's local time, wrapping midnight when the end
# comes first; a cron's alerts wait while one holds (watch/alerts/).

def quiet_minutes(text) -> tuple | None:
    """(start, end) minutes of the day of "HH:MM-HH:MM", or None when it is not one
    (start and end equal is none: a window of no time or of all of it says nothing)."""
    if not isinstance(text, str) or len(text) != 11 or text[5] != "-":
        return None
    out = []
    for part in (text[:5], text[6:]):
        hh, colon, mm = part[:2], part[2], part[3:]
        if colon != ":" or not (hh.isascii() and hh.isdigit() and mm.isascii() and mm.isdigit()):
            return None
        if int(hh) > 23 or int(mm) > 59:
            return None
        out.append(int(hh) * 60 + int(mm))
    return None if out[0] == out[1] else tuple(out)


def in_quiet(text, t: int) -> bool:
    """Whether the local time at t is inside the quiet hours `text` (None: never)."""
    window = quiet_minutes(text) if text else None
    if window is None:
        return False
    import time
    local = time.localtime(t)
    minute = local.tm_hour * 60 + local.tm_min
    start, end = window
    return start <= minute < end if start < end else (minute >= start or minute < end)


def quiet_between(text, lo: int, hi: int) -> bool:
    """Whether any time from lo to hi (both included) is inside the quiet hours `text`."""
    window = quiet_minutes(text) if text else None
    if window is None or hi < lo:
        return False
    if in_quiet(text, lo) or hi - lo >= 2 * 86400:
        return True
    import time
    day = time.localtime(lo)
    for shift in range(3):  # a window starting later on lo's day or on one of the next two
        start = int(time.mktime((day.tm_year, day.tm_mon, day.tm_mday + shift,
                                 window[0] // 60, window[0] % 60, 0, 0, 0, -1)))
        if lo < start <= hi:
            return True
    return False
