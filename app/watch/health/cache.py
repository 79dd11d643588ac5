"""Firings around now per schedule (Schedules), and the cache that keeps them across reads
and, through the notify tick's file, across processes (no Flask).
"""
from __future__ import annotations

import time

from qlshadow.watch.health.facts import NO_FIRINGS, Firings

_MINUTE = 60
_DAY = 86400
# Windows searched for the firings around now: most schedules fire within the first.
_YEAR = 366 * _DAY
WINDOWS = (2 * 3600, 2 * _DAY, 32 * _DAY, _YEAR + 32 * _DAY)

# Firings around now, by (schedule, local zone, window): (lo, hi, firings). A schedule's
# firings near now change only with the clock, so reads within two hours share them (each
# entry is worked out two hours ahead). Small: an entry is kept only when it holds at most
# _NEAR_FIRINGS firings (a wide window of a frequent schedule is not); cleared when full.
_NEAR: dict = {}
_NEAR_MAX = 256
_NEAR_FIRINGS = 512


def _zone() -> tuple:
    return (time.timezone, time.altzone, time.daylight, time.tzname)


def near_firings() -> list:
    """This process's cached firings near now in the local zone: [[schedule, window, lo,
    hi, firings]], for a process that starts anew every minute (the notify tick) to keep."""
    zone = _zone()
    return [[schedule, window, lo, hi, found]
            for (schedule, z, window), (lo, hi, found) in _NEAR.items() if z == zone]


def keep_near_firings(entries: list) -> None:
    """Take firings near_firings() gave, worked out in this same local zone."""
    zone = _zone()
    for schedule, window, lo, hi, found in entries[:_NEAR_MAX]:
        _NEAR[(schedule, zone, window)] = (lo, hi, found)


class Schedules:
    """Firings near one `now` for many crons, sharing the local clocks they need."""

    def __init__(self, now: int):
        self.now = now
        self._clocks: dict = {}
        self._found: dict = {}  # (schedule, (lo, hi)) -> firings: crons share schedules
        self._around: dict = {}

    def _firings(self, schedule: str, window: int) -> list:
        """The firings in [now - window, now + window]."""
        now = self.now
        lo, hi = now - window, now + 1 + window
        found = self._found.get((schedule, window))
        if found is None:
            key = (schedule, _zone(), window)
            cached = _NEAR.get(key)
            if cached is not None and cached[0] <= lo and hi <= cached[1]:
                found = [f for f in cached[2] if lo <= f < hi]
            else:
                # Evaluated two hours ahead of now and kept across reads: the next reads
                # of the coming two hours find it there.
                ahead = hi + WINDOWS[0]
                found = self._evaluate(schedule, lo, ahead)
                if len(found) <= _NEAR_FIRINGS:
                    if len(_NEAR) >= _NEAR_MAX:
                        _NEAR.clear()
                    _NEAR[key] = (lo, ahead, found)
                found = [f for f in found if f < hi]
            self._found[(schedule, window)] = found
        return found

    def _evaluate(self, schedule: str, lo: int, hi: int) -> list:
        from qlshadow.watch.firing_times import LocalClock, firings
        clock = self._clocks.get((lo, hi))
        if clock is None:
            clock = self._clocks[(lo, hi)] = LocalClock(lo - 2 * _DAY, hi + 2 * _DAY)
        return firings(schedule, lo, hi, clock)

    def around(self, schedule: str) -> Firings:
        found = self._around.get(schedule)
        if found is None:
            from cronsim import CronSimError
            try:
                found = self._search(schedule)
            except (CronSimError, ValueError):  # a date no calendar has (31 February)
                found = NO_FIRINGS
            self._around[schedule] = found
        return found

    def _search(self, schedule: str) -> Firings:
        now = self.now
        due_before = now - _MINUTE + 1  # a firing is due once its minute has ended
        due: list = []
        upcoming = None
        for window in WINDOWS:
            # Both directions in one evaluation; wider only while something is missing.
            found = self._firings(schedule, window)
            due = [f for f in found if f < due_before]
            later = [f for f in found if f > now]
            if upcoming is None and later:
                upcoming = later[0]
            if len(due) >= 2 and upcoming is not None:
                break
        return Firings(due[-2:], upcoming, lambda t: self._first_after(schedule, t))

    def between(self, schedule: str, lo: int, hi: int) -> list:
        """The firings in [lo, hi), lo at most a month before now (else from a month ago)."""
        for window in WINDOWS[:3]:
            if lo >= self.now - window or window == WINDOWS[2]:
                return [f for f in self._firings(schedule, window) if lo <= f < hi]
        return []

    def _first_after(self, schedule: str, t: int) -> int | None:
        # The windows around() already used, so their clocks are reused; a streak of misses
        # older than a month is reported from a month ago.
        for window in WINDOWS[:3]:
            if t + 1 < self.now - window and window != WINDOWS[2]:
                continue
            found = [f for f in self._firings(schedule, window) if f > t]
            if found:
                return found[0]
        return None
