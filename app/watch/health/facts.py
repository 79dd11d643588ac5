"""The facts health judges a cron by: its executions and its firings around now (no Flask).

An Execution is one run as both sources tell it (a Legacy instance, a Shadow Run, or both
merged); Firings are a schedule's firings near one instant. reads.py makes the first,
cache.py the second, and state.py judges them.
"""
from __future__ import annotations

import itertools


class Execution:
    """One execution as both sources tell it: start (task clock), end, exit code, whether it
    is still open, and whether crond started it (True: it has a Run; False: a manual run,
    Shadow on and no Run; None: unknown, Shadow off), and the id of the host it ran on
    (read only for a cron judged per host, else None)."""
    __slots__ = ("start", "end", "exit_code", "open", "scheduled", "pid", "host")

    def __init__(self, start, end, exit_code, open_, scheduled, pid=None, host=None):
        self.start, self.end, self.exit_code = start, end, exit_code
        self.open, self.scheduled, self.pid, self.host = open_, scheduled, pid, host


class Firings:
    """A cron's firings around `now`: the last two whose minute has ended, and the next.

    first_after(t) finds the first firing after t, for when a cron has missed several.
    """

    def __init__(self, due: list, upcoming: int | None, first_after=None):
        self.due, self.next = due, upcoming
        self._first_after = first_after

    def first_after(self, t: int) -> int | None:
        return self._first_after(t) if self._first_after else None

    def is_firing(self, t: int) -> bool:
        """Whether the schedule fires at instant t (False when it cannot tell)."""
        return self._first_after is not None and self._first_after(t - 1) == t

    def shortest_gap(self) -> int | None:
        points = self.due + ([self.next] if self.next is not None else [])
        gaps = [b - a for a, b in itertools.pairwise(points) if b > a]
        return min(gaps) if gaps else None


NO_FIRINGS = Firings([], None)
