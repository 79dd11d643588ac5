"""Whether a due firing has a record, was skipped by crond, or is missed (pure functions).

The grace a firing gets, and the rules evaluate (state.py), the page and the count of
missed firings share: a record stands for a firing, crond skipped it while the line's
previous run was open, or it counts as missed once its grace ran out.
"""
from __future__ import annotations

import bisect

from qlshadow.watch.health.conditions import overlaps, stuck_limit
from qlshadow.watch.health.facts import Firings

GRACE_SHARE = 0.1  # default grace: a tenth of the shortest gap between firings near now,
GRACE_MIN, GRACE_MAX = 60, 3600  # within a minute and an hour
_MINUTE = 60


def default_grace(firings: Firings) -> int:
    """A tenth of the shortest gap between the firings near now, within 60 s and 1 h."""
    gap = firings.shortest_gap()
    if gap is None:
        return GRACE_MAX
    return int(min(GRACE_MAX, max(GRACE_MIN, gap * GRACE_SHARE)))


def skipped_by_crond(firing: int, by_start: list, limit: int) -> bool:
    """Whether BusyBox crond skipped the firing because the line's previous run was still
    open then: one crond started before it that finished at or after it, or that has no
    finish, within its stuck limit and before crond started the line again."""
    i = bisect.bisect_left([e.start for e in by_start], firing)
    crond_s = [e for e in by_start[:i] if e.scheduled is not False]
    if not crond_s:
        return False
    e = crond_s[-1]  # crond starts a line only once its previous run ended
    if e.end is not None:
        return e.end >= firing
    return e.open and firing < e.start + limit


def missed_or_late(due: list, executions: list, judged_from: int, firings: Firings,
                   grace: int, limit: int, now: int, overlapping) -> tuple:
    """(missed, since, late) of one set of executions (a cron's, or one host's of it): the
    first of the last two due firings with no record past its grace and when the cron
    counts as missed (both None when none), else the latest due firing with no record yet
    (None when it has one)."""
    by_start = sorted(executions, key=lambda e: e.start)
    starts = [e.start for e in by_start]
    is_firing = firings.is_firing

    def started(firing: int) -> bool:
        return (firing_started(firing, starts, by_start, grace, is_firing)
                or (skipped_by_crond(firing, by_start, limit) and not overlapping()))

    if not due or started(due[-1]):
        return None, None, None
    missing = [f for f in due[-2:] if not started(f) and now >= missed_after(f, grace)]
    if not missing:
        return None, None, due[-1]
    after = max(judged_from, by_start[-1].start if by_start else judged_from)
    first = firings.first_after(after)
    first = first if first is not None and first <= missing[0] else missing[0]
    return missing[0], missed_after(first, grace), None


def missed_after(firing: int, grace: int) -> int:
    """When a firing with no record counts as missed: its grace after the firing itself, as
    Healthchecks counts a period's grace (not after the end of the firing's minute, which
    made every-minute crons be told 3 minutes after their last finish), and never before
    its minute ended (it is due only then)."""
    return firing + max(grace, _MINUTE)


def firing_started(firing: int, starts: list, by_start: list, grace: int,
                   is_firing=None) -> bool:
    """Whether a record stands for the firing: one in its own minute, or one starting later
    until its grace ran out in a minute that is no firing of its own (is_firing(minute),
    when known: that record stands for its own firing, so a gap before it stays a gap, as
    in the gate); a known manual run only in the firing's own minute (as in the gate)."""
    i = bisect.bisect_left(starts, firing)
    own = firing // _MINUTE
    while i < len(starts) and starts[i] < firing + _MINUTE + grace:
        e = by_start[i]
        minute = e.start // _MINUTE
        if minute == own:
            return True
        if e.scheduled is not False and not (is_firing and is_firing(minute * _MINUTE)):
            return True
        i += 1
    return False


def missed_firings(cron: dict, executions: list, expected: list, grace: int, now: int,
                   steps: list = (), is_firing=None, daemon: str | None = None,
                   max_runtime: int | None = None) -> int:
    """How many of the firings in `expected` have no record and are past their grace (none
    in a clock step, none crond skipped while the previous run was open)."""
    from qlshadow.watch.firing_times import in_clock_step
    by_start = sorted(executions, key=lambda e: e.start)
    starts = [e.start for e in by_start]
    limit = stuck_limit(executions, grace, max_runtime)[0]
    return sum(1 for f in expected
               if now >= missed_after(f, grace) and not in_clock_step(f, steps)
               and not firing_started(f, starts, by_start, grace, is_firing)
               and not (skipped_by_crond(f, by_start, limit) and not overlaps(daemon)))
