"""What an open execution is: running, stuck or finish_lost, and its stuck limit (pure).

Every surface shows this one rule (status, runs, /open/runs, the page, the gate, /metrics).
"""
from __future__ import annotations

from qlshadow.i18n import _

# What an open execution is (docs/CONTRACT.md §13.1), the one rule every surface shows
# (status, runs, /open/runs, the page, the gate, /metrics): `running` within its cron's
# stuck limit, `stuck` past it, `finish_lost` once a later execution crond started on the
# same host proves it ended (crond starts a line only when its previous run there ended;
# another host's crond proves nothing of it; a daemon that starts overlapping runs proves
# nothing so, and its open runs only become stuck).
CONDITIONS = ("running", "stuck", "finish_lost")
# Cron daemons that start a line while its previous run is still going (Vixie/Debian cron,
# cronie): their firings are never skipped, and a later start says nothing of an earlier.
OVERLAPPING = "overlapping"

STUCK_FACTOR = 3  # stuck: running longer than 3 x the median of recent successful runs,
STUCK_SAMPLES = 3  # once there are at least this many to take a median of;
STUCK_DEFAULT = 3600  # before that, an hour (and never less than the grace)


def stuck_limit(executions: list, grace: int, max_runtime: int | None = None) -> tuple:
    """(seconds, why) after which an open execution counts as stuck: the cron's own
    max_runtime when it has one, else the rule below."""
    if max_runtime:
        return max_runtime, _("{limit} s, its max_runtime").format(limit=max_runtime)
    durations = sorted(e.end - e.start for e in executions
                       if not e.open and e.exit_code == 0 and e.end is not None
                       and e.end >= e.start)
    if len(durations) < STUCK_SAMPLES:
        limit = max(STUCK_DEFAULT, grace)
        return limit, _("{limit} s, as fewer than {samples} successful runs tell how long it "
                        "usually runs").format(limit=limit, samples=STUCK_SAMPLES)
    median = durations[len(durations) // 2]
    limit = max(STUCK_FACTOR * median, grace)
    return limit, _("{limit} s ({factor} x its median run of {median} s, at least its "
                    "grace)").format(limit=limit, factor=STUCK_FACTOR, median=median)


def condition(start: int, limit: int, now: int, later_start: int | None = None,
              overlapping: bool = False) -> tuple:
    """(word of CONDITIONS, since) of one open execution started at `start` (a pure function).

    later_start: when the cron's next execution that crond started began (None: none).
    """
    if later_start is not None and not overlapping:
        return "finish_lost", later_start
    if now - start > limit:
        return "stuck", start + limit
    return "running", start


def overlaps(daemon) -> bool:
    """Whether the daemon (a kind, or a function that finds it, called only when needed:
    the tick scans /proc only when the answer matters) starts overlapping runs."""
    return (daemon() if callable(daemon) else daemon) == OVERLAPPING


def open_conditions(executions: list, limit: int, now: int, overlapping=False) -> dict:
    """{start: (condition, since)} of every open execution among a cron's executions.

    Only an execution crond started (or may have: Shadow off) is ended by a later one
    crond started on the same host (any host for one whose host is unknown: None, on SQLite
    or from before the fleet); a manual run can overlap anything. overlapping: a bool, or a
    function that tells it (asked only when an open execution has a later one).
    """
    by_start = sorted(executions, key=lambda e: e.start)
    found = {}
    for i, e in enumerate(by_start):
        if not e.open:
            continue
        later = None
        if e.scheduled is not False:
            later = next((x.start for x in by_start[i + 1:]
                          if x.scheduled is not False and x.start > e.start
                          and (e.host is None or x.host == e.host)), None)
        lapping = False  # matters only when a later execution started
        if later is not None:
            lapping = overlapping() if callable(overlapping) else overlapping
        found[e.start] = condition(e.start, limit, now, later, lapping)
    return found


def open_counts(conditions: dict) -> dict:
    """{condition: how many} over CONDITIONS, zero when absent."""
    counts = dict.fromkeys(CONDITIONS, 0)
    for word, _since in conditions.values():
        counts[word] += 1
    return counts
