"""Cron schedule validation: 5 fields, 6 fields (leading seconds), or @once / @boot."""
from __future__ import annotations

SPECIAL = ("@once", "@boot")
_MONTHS = {m: i for i, m in enumerate(
    "jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}
_DAYS = {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}
# (name, low, high, names) for minute-first schedules
_FIELDS = (("minute", 0, 59, None), ("hour", 0, 23, None), ("day of month", 1, 31, None),
           ("month", 1, 12, _MONTHS), ("day of week", 0, 7, _DAYS))
_SECONDS = ("second", 0, 59, None)


def _value(text: str, lo: int, hi: int, names) -> int:
    if names and text.lower() in names:
        return names[text.lower()]
    if not text.isascii() or not text.isdigit():
        raise ValueError
    number = int(text)
    if not lo <= number <= hi:
        raise ValueError
    return number


def _check_field(text: str, lo: int, hi: int, names) -> None:
    for part in text.split(","):
        base, slash, step = part.partition("/")
        if slash and (not step.isascii() or not step.isdigit() or int(step) == 0):
            raise ValueError
        if base == "*":
            continue
        start, dash, end = base.partition("-")
        first = _value(start, lo, hi, names)
        if dash and _value(end, lo, hi, names) < first:
            raise ValueError


def check_schedule(schedule) -> str:
    """Return the schedule normalised to single spaces, or raise ValueError naming it."""
    if not isinstance(schedule, str):
        raise ValueError("the schedule must be a string")
    fields = schedule.split()
    if len(fields) == 1 and fields[0] in SPECIAL:
        return fields[0]
    specs = {5: _FIELDS, 6: (_SECONDS,) + _FIELDS}.get(len(fields))
    if specs is None:
        raise ValueError(f"schedule {schedule!r} must have 5 or 6 fields, or be @once or @boot")
    for text, (name, lo, hi, names) in zip(fields, specs):
        try:
            _check_field(text, lo, hi, names)
        except ValueError:
            raise ValueError(f"schedule {schedule!r} has an invalid {name} field {text!r}") from None
    return " ".join(fields)


def field_count(schedule: str) -> int:
    """5 or 6 for field schedules, 0 for @once/@boot."""
    return 0 if schedule in SPECIAL else len(schedule.split())
