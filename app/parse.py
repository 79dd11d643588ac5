"""The one integer parser: ids, pids, times and limits read the same way everywhere.

JSON bodies, query strings and command-line arguments all accept an int or an ASCII
digit string; so the same id string is valid or invalid whatever path it came in by.
"""
from __future__ import annotations

from qlshadow.errors import InvalidInput

INT64_MAX = 2**63 - 1
INT32_MIN, INT32_MAX = -2**31, 2**31 - 1
# The latest second a time the API takes may hold (2106-02-07 06:28:15 UTC): past any
# router's clock, and seconds * 1000 stays far inside an execution id's 48 bits.
TIME_MAX = 2**32 - 1
# 19 digits hold every int64; a longer digit string is refused before int() so that a
# huge body cannot make us convert a million-digit number.
_MAX_DIGITS = 19


def to_int(value, lo: int, hi: int) -> int | None:
    """value as an int within [lo, hi] (an int, or a string of ASCII digits), else None."""
    if type(value) is int:
        number = value
    elif (type(value) is str and 0 < len(value) <= _MAX_DIGITS and value.isascii()
          and value.isdigit()):
        number = int(value)
    else:
        return None
    return number if lo <= number <= hi else None


def parse_int(value, field: str, lo: int, hi: int) -> int:
    """to_int, or InvalidInput naming the field and the range."""
    number = to_int(value, lo, hi)
    if number is None:
        raise InvalidInput(f"'{field}' must be an integer between {lo} and {hi}.")
    return number


def parse_id(value, field: str = "id") -> int:
    """A positive int64 id (a cron id, a failure id)."""
    number = to_int(value, 1, INT64_MAX)
    if number is None:
        raise InvalidInput(f"'{field}' must be a positive integer id.")
    return number


def parse_ids(value, field: str | None = None) -> tuple:
    """A non-empty list of positive int64 ids, duplicates collapsed to the first (order kept).

    field names the body key that holds the list; None means the whole body is the list.
    One rule for every id list (the callback's `ids`, the cron endpoints' bodies, the CLI),
    so `[5, "5"]` means cron 5 once wherever it is sent.
    """
    where = f"'{field}'" if field else "The request body"
    if not isinstance(value, list) or not value:
        raise InvalidInput(f"{where} must be a non-empty list of positive integer cron ids.")
    ids = {}
    for item in value:
        number = to_int(item, 1, INT64_MAX)
        if number is None:
            raise InvalidInput(f"{where} must be a non-empty list of positive integer cron ids.")
        ids[number] = None
    return tuple(ids)
