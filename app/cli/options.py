"""The values options take and the options several commands share: ids and counts, times
and durations, a cron by id or name, alert tuning, --json and --utc; each value a usage
mistake (exit 2) when it cannot be read."""
from __future__ import annotations

import argparse

from qlshadow.parse import INT64_MAX, to_int


def cron_ref(text: str):
    """A cron as the CLI takes it: its id (a number), or its name, looked up once the
    database is open (cron_id_of)."""
    if text.isascii() and text.isdigit():
        return positive_int(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("a cron is named by its id or its name, not by nothing")
    return text


def tuning_arguments(q) -> None:
    """The alert tuning options of `cron add` and `cron edit`."""
    q.add_argument("--alert-after", type=_alert_after, metavar="N",
                   help="send the failed alert only at the N-th failure in a row (1-1000)")
    q.add_argument("--max-runtime", type=_max_runtime, metavar="DURATION",
                   help="stuck when running longer than this (90, 30m, 2h); none: the usual rule")
    q.add_argument("--quiet", type=_quiet_option, metavar="HH:MM-HH:MM",
                   help="quiet hours every day, local time (23:00-07:00); none: no quiet hours")


def _alert_after(text: str) -> int:
    number = to_int(text, 1, 1000)
    if number is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of failures from 1 to 1000")
    return number


def _max_runtime(text: str) -> int:
    """Seconds of --max-runtime (90, 30m, 2h, 1d), 0 for `none` (the usual stuck rule)."""
    from qlshadow.cli.timeparse import TimeError, parse_duration
    if text.strip().lower() == "none":
        return 0
    try:
        return parse_duration(text, "--max-runtime")
    except TimeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _quiet_option(text: str) -> str:
    """--quiet HH:MM-HH:MM, or "" for `none` (no quiet hours)."""
    from qlshadow.core.schedule import quiet_minutes
    if text.strip().lower() == "none":
        return ""
    if quiet_minutes(text.strip()) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not quiet hours; use HH:MM-HH:MM in "
                                         "local time (23:00-07:00 wraps midnight) or none")
    return text.strip()


def positive_int(text: str) -> int:
    # Ids are int64 in both databases: a larger number names nothing and cannot be bound.
    number = to_int(text, 1, INT64_MAX)
    if number is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a positive integer (at most {INT64_MAX})")
    return number


def whole_number(text: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(text)


def time_value(text: str) -> int:
    """A time option's value (timeparse.parse_time); argparse names the option."""
    from qlshadow.cli.timeparse import TimeError, parse_time
    try:
        return parse_time(text)
    except TimeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def duration_value(text: str) -> int:
    from qlshadow.cli.timeparse import TimeError, parse_duration
    try:
        return parse_duration(text)
    except TimeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def output_options(p, json_help: str = "print JSON for scripts, not a table") -> None:
    """--json and --utc, for a command that prints a table."""
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--utc", action="store_true", help="show times in UTC, not the box's local time")


TIME_HELP = ("24h, 7d, 30m, 2026-11-30[T04:00], today, yesterday, 03:55 (today, local "
             "time), \"yesterday 22:00\" or epoch seconds")


CRON_HELP = "its id, or its name when one cron has it"
