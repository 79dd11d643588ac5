"""The reconciliation gate: do the Shadow Runs match what crond really did? (no Flask)

On demand and read-only: it evaluates each active cron's schedule over a window the way
BusyBox crond does, and compares the firings with the Shadow Runs, the Legacy instances
and the accept failures of that window. gate.py holds the entry point and the verdict,
reads.py the window's SQL, judge.py what the gate asks health about open Runs, and
cron_report.py one cron's report.

Firings are worked out by watch/firing_times.py (the way BusyBox crond starts lines, and
clock steps); open Runs are worded, and crond's overlap skips told, by health's rules.

The names the rest of the code uses are imported here from the module that holds them.
"""
from __future__ import annotations

from qlshadow.watch.reconcile.cron_report import MAX_LISTED
from qlshadow.watch.reconcile.gate import ReconcileError, reconcile

__all__ = ["MAX_LISTED", "ReconcileError", "reconcile"]
