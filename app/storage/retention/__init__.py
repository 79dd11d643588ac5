"""Retention: old Runs, finished instances, tokens and task logs are deleted (no Flask).

No timers (ADR-0446): retention runs in two places only. Pruner.on_write() runs inside a
callback's write transaction, and every PRUNE_EVERY writes deletes at most a small batch;
prune() is `qlshadow prune`, for an operator or a crontab line, and deletes everything due.

What is deleted (docs/CONTRACT.md "Retention"):
- a Run accepted and exited more than QL_RETENTION_DAYS ago; an instance that finished
  more than QL_RETENTION_DAYS ago (exits and finishes by the server's clock);
- a cron's Runs and instances beyond its newest QL_RETENTION_ROWS_PER_CRON, whatever state;
- tokens past their expiration (issuing a token also caps the app's tokens, auth.py);
- a cron's task logs beyond its newest QL_RETENTION_LOGS_PER_CRON files or older than
  QL_RETENTION_LOG_DAYS; the newest log of a cron is never deleted;
- on SQLite, while the data dir's database pages in use, WAL and task logs together exceed
  QL_STORAGE_BUDGET: the oldest exited Runs and finished instances, whatever their age.
A Run or instance still running "may still finish": its process may be alive and its finish
callback may arrive at any time, so age alone never deletes it. Only the row cap does, once
its cron has recorded that many newer executions (it is then superseded).

The modules: policy (the settings in force), usage (the prune reserve and the bytes the
budget counts), deletes (the bounded statements), task_logs, pruner (the write path's
Pruner and over_budget) and prune_command (`qlshadow prune`, loaded by that command only:
prune is looked up on first use, so a server never loads it).
"""
from __future__ import annotations

from qlshadow.storage.retention.deletes import (capped_instances, capped_runs, expired_alert_events,
                                                expired_instances, expired_runs)
from qlshadow.storage.retention.policy import DAY, Policy, policy_of
from qlshadow.storage.retention.pruner import PRUNE_EVERY, WRITE_BATCH, Pruner, over_budget
from qlshadow.storage.retention.task_logs import log_stamp, prune_log_folder
from qlshadow.storage.retention.usage import (RESERVE_BYTES, RESERVE_NAME, database_bytes,
                                              log_bytes, make_reserve, release_reserve,
                                              reserve_path, storage_use)

__all__ = ["DAY", "PRUNE_EVERY", "RESERVE_BYTES", "RESERVE_NAME", "WRITE_BATCH", "Policy",
           "Pruner", "capped_instances", "capped_runs", "database_bytes", "expired_alert_events",
           "expired_instances", "expired_runs", "log_bytes", "log_stamp", "make_reserve",
           "over_budget", "policy_of", "prune", "prune_log_folder", "release_reserve",
           "reserve_path", "storage_use"]


def __getattr__(name: str):
    """prune, from prune_command, imported on first use (only `qlshadow prune` needs it)."""
    if name == "prune":
        from qlshadow.storage.retention.prune_command import prune
        return prune
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
