"""A health state per cron, from its schedule and its recent history (no Flask).

`evaluate` (state.py) is a pure function of (cron, recent executions, firings around now,
now): the API, `qlshadow status`, /metrics and the notify tick all call it through
`read_all` (crons.py), which reads what it needs for every cron in a few statements
(reads.py), each an index seek per cron (never a scan of the history), and the firings
near now once per schedule (cache.py). docs/CONTRACT.md §13.1 defines the states, and the
condition of an open execution (conditions.py, runs.py) that every surface shows.

The names the rest of the code uses are imported here from the module that holds them.
"""
from __future__ import annotations

from qlshadow.watch.health.cache import Schedules, keep_near_firings, near_firings
from qlshadow.watch.health.conditions import CONDITIONS, condition
from qlshadow.watch.health.crons import MAX_CRONS, read_all
from qlshadow.watch.health.facts import NO_FIRINGS, Execution, Firings
from qlshadow.watch.health.missed import firing_started, missed_after, skipped_by_crond
from qlshadow.watch.health.reads import RECENT, judge_per_host, recent_executions
from qlshadow.watch.health.runs import run_conditions, with_conditions
from qlshadow.watch.health.state import PROBLEMS, STATES, alert_mark_text, evaluate, public

__all__ = [
    "CONDITIONS", "MAX_CRONS", "NO_FIRINGS", "PROBLEMS", "RECENT", "STATES", "Execution",
    "Firings", "Schedules", "alert_mark_text", "condition", "evaluate", "firing_started",
    "judge_per_host", "keep_near_firings", "missed_after", "near_firings", "public",
    "read_all", "recent_executions", "run_conditions", "skipped_by_crond", "with_conditions",
]
