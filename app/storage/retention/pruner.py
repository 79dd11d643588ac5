"""The write path's retention: every PRUNE_EVERY callbacks, inside the callback's write
transaction, a small batch of what is due is deleted (Pruner.on_write); over_budget
deletes the oldest finished rows while the storage use is over its budget."""
from __future__ import annotations

import itertools
import os

from qlshadow.storage.db.statements import prebuilt
from qlshadow.storage.models import database
from qlshadow.storage.retention.deletes import (CAPS, expired_alert_events, expired_instances,
                                                expired_runs)
from qlshadow.storage.retention.policy import DAY, Policy
from qlshadow.storage.retention.task_logs import prune_log_folder
from qlshadow.storage.retention.usage import log_bytes, storage_use

# Every PRUNE_EVERY callbacks a step deletes at most WRITE_BATCH rows per rule: one row per
# callback, twice what callbacks add (an execution is two callbacks, one Run and one
# instance), so the write path keeps up; and a few pages per step, never a long lock.
PRUNE_EVERY = 64
WRITE_BATCH = 64
# The newest possible cutoff: with it the age rules delete the oldest finished rows.
ANY_AGE = 2 ** 62
LOG_BYTES_EVERY = 16  # write-path steps between two walks of the task logs


def over_budget(policy: Policy, limit: int, logs: int | None = None) -> int:
    """Delete up to limit of the oldest exited Runs and of the oldest finished instances
    while the use is over the budget; returns rows deleted (0 when within it)."""
    if not policy.budget or storage_use(policy, logs)["used_bytes"] <= policy.budget:
        return 0
    return expired_runs(ANY_AGE, limit) + expired_instances(ANY_AGE, limit)


class Pruner:
    """The write path's retention: one app's policy and round-robin cursors (its Runtime's)."""

    def __init__(self, policy: Policy):
        self.policy = policy
        self._writes = itertools.count(1)  # next() is atomic under the GIL: no lock here
        # The cron whose cap is checked next, per table, and the log folder pruned next.
        self._cursor = {"runs": 0, "instances": 0, "logs": ""}
        self._steps = 0
        self._log_bytes = 0  # task log bytes at the last walk (every LOG_BYTES_EVERY steps)

    def on_write(self, now: int) -> int:
        """Every PRUNE_EVERY calls, delete at most a small batch of what is due; returns rows+files.

        Meant to run inside a callback's write transaction: one counter step most of the
        time; otherwise a few indexed statements touching at most WRITE_BATCH rows per rule,
        one cron's cap and one cron's log folder.
        """
        policy = self.policy
        if next(self._writes) % PRUNE_EVERY or not (policy.rows_on or policy.logs_on):
            return 0
        deleted = 0
        if policy.days:
            cutoff = now - policy.days * DAY
            deleted += expired_runs(cutoff, WRITE_BATCH) + expired_instances(cutoff, WRITE_BATCH)
            # Alert events too (their deliveries go by the foreign key): the notify tick
            # prunes them only while a channel is configured.
            deleted += expired_alert_events(cutoff, WRITE_BATCH)
        if policy.rows_per_cron:
            for table, capped, next_sql, first_sql in CAPS:
                cron_id = self._next_cron(table, next_sql, first_sql)
                if cron_id is not None:
                    count = capped(cron_id, policy.rows_per_cron, WRITE_BATCH)
                    deleted += count
                    if count == WRITE_BATCH:
                        # More is due: stay on this cron, so one busy cron among many quiet
                        # ones is brought back to its cap instead of growing between visits.
                        self._cursor[table] = cron_id - 1
        if policy.logs_on:
            folder = self._next_log_folder(policy.log_dir)
            if folder:
                deleted += prune_log_folder(folder, policy, now, WRITE_BATCH)[0]
        if policy.budget:
            if self._steps % LOG_BYTES_EVERY == 0:
                self._log_bytes = log_bytes(policy.log_dir)
            self._steps += 1
            deleted += over_budget(policy, WRITE_BATCH, self._log_bytes)
        return deleted

    def _next_cron(self, table: str, next_sql: str, first_sql: str):
        """The next cron id holding rows in table after the cursor (wrapping); None when empty."""
        execute = database.obj.execute_sql
        row = execute(prebuilt(next_sql), (self._cursor[table],)).fetchone()
        if row is None:
            row = execute(prebuilt(first_sql)).fetchone()
        self._cursor[table] = row[0] if row else 0
        return row[0] if row else None

    def _next_log_folder(self, log_dir: str) -> str:
        """The next cron log folder after the cursor (wrapping), by name."""
        try:
            names = sorted(e.name for e in os.scandir(log_dir) if e.is_dir(follow_symlinks=False))
        except OSError:
            return ""
        if not names:
            return ""
        name = next((n for n in names if n > self._cursor["logs"]), names[0])
        self._cursor["logs"] = name
        return os.path.join(log_dir, name)
