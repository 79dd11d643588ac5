"""`qlshadow prune`: everything due now, in short transactions, with the reserve released
first on a full partition and made again last. Only the command loads this module."""
from __future__ import annotations

import os

from qlshadow.storage.db.engine import checkpoint, is_sqlite
from qlshadow.storage.db.statements import prebuilt
from qlshadow.storage.db.transactions import connected, write_slice, write_transaction
from qlshadow.storage.models import INSTANCE_RUNNING, Token, database
from qlshadow.storage.retention.deletes import capped_instances, capped_runs
from qlshadow.storage.retention.policy import DAY, policy_of
from qlshadow.storage.retention.pruner import over_budget
from qlshadow.storage.retention.task_logs import prune_log_folder
from qlshadow.storage.retention.usage import (PRUNE_WAL_PAGES, log_bytes, make_reserve,
                                              release_reserve)

PRUNE_BATCH = 64    # rows per transaction in `qlshadow prune`: callbacks wait at most that


def prune(settings, now: int, released: bool = False) -> dict:
    """Delete everything due now, in short transactions; returns what was deleted.

    On a (nearly) full partition the reserve file goes first, then task logs: both free the
    space the database needs to delete. The WAL is kept small while deleting, then
    checkpointed and truncated, giving its space back; the reserve is made again last.
    `released` says the caller released the reserve already (before opening the database,
    which on SQLite needs room for its shared-memory file).
    """
    policy = policy_of(settings)
    sqlite = settings.db_url.startswith("sqlite:")
    released = released or (sqlite and release_reserve(settings.data_dir))
    done = {"runs": 0, "instances": 0, "tokens": 0, "log_files": 0, "log_bytes": 0,
            "over_budget": 0}  # Runs and instances deleted to get within the budget
    if policy.logs_on and os.path.isdir(policy.log_dir):
        for entry in sorted(os.scandir(policy.log_dir), key=lambda e: e.name):
            if entry.is_dir(follow_symlinks=False):
                files, freed = prune_log_folder(entry.path, policy, now, None)
                done["log_files"] += files
                done["log_bytes"] += freed

    def repeat(step) -> int:
        total = 0
        while True:
            with write_slice():
                count = step()
            total += count
            if count < PRUNE_BATCH:
                return total

    execute = database.obj.execute_sql
    with connected():
        if is_sqlite():
            # Checkpoint every few pages, so the WAL restarts from its beginning instead of
            # growing into space the reserve freed (this connection only).
            execute(f"PRAGMA wal_autocheckpoint = {PRUNE_WAL_PAGES}")
        if policy.days:
            cutoff = now - policy.days * DAY
            done["runs"] += _expired_runs_all(cutoff)
            done["instances"] += _expired_instances_all(cutoff)
        if policy.rows_per_cron:
            cap = policy.rows_per_cron
            for (cron_id,) in execute('SELECT DISTINCT "cron_id" FROM "shadow_runs"').fetchall():
                done["runs"] += repeat(lambda c=cron_id: capped_runs(c, cap, PRUNE_BATCH))
            for (cron_id,) in execute('SELECT DISTINCT "cron_id" FROM "running_instances"').fetchall():
                done["instances"] += repeat(lambda c=cron_id: capped_instances(c, cap, PRUNE_BATCH))
        with write_transaction():
            done["tokens"] = Token.delete().where(Token.expiration <= now).execute()
        checkpoint()
        if policy.budget:
            logs = log_bytes(policy.log_dir)
            while True:
                with write_slice():
                    count = over_budget(policy, PRUNE_BATCH, logs)
                checkpoint()  # the WAL counts too: each batch's is given back before the next
                if not count:
                    break
                done["over_budget"] += count
    if sqlite:
        done["reserve_released"] = released
        done["reserve"] = make_reserve(settings.data_dir)
    return done


def _expired_runs_all(cutoff: int) -> int:
    """Every exited Run accepted and exited before cutoff, walking the table's key."""
    execute = database.obj.execute_sql
    window = prebuilt('SELECT "accepted_at", "id" FROM "shadow_runs" WHERE "accepted_at" < ? '
                      'AND ("accepted_at", "id") > (?, ?) ORDER BY "accepted_at", "id" '
                      'LIMIT 1 OFFSET ?')
    delete = prebuilt('DELETE FROM "shadow_runs" WHERE "accepted_at" < ? AND '
                      '("accepted_at", "id") > (?, ?) AND ("accepted_at", "id") <= (?, ?) '
                      'AND "finished_at" < ?')  # an exited Run's (none while running)
    last = prebuilt('SELECT "accepted_at", "id" FROM "shadow_runs" WHERE "accepted_at" < ? '
                    'ORDER BY "accepted_at" DESC, "id" DESC LIMIT 1')
    after, total = (-2**62, b""), 0
    while True:
        with write_slice():
            upto = execute(window, (cutoff, *after, PRUNE_BATCH - 1)).fetchone()
            if upto is None:
                upto = execute(last, (cutoff,)).fetchone()
                if upto is None or tuple(upto) <= after:
                    return total
            total += execute(delete, (cutoff, *after, *upto, cutoff)).rowcount
        after = tuple(upto)


def _expired_instances_all(cutoff: int) -> int:
    """Every finished instance older than cutoff, walking the table by id in batches."""
    execute = database.obj.execute_sql
    window = prebuilt('SELECT MAX("id") FROM (SELECT "id" FROM "running_instances" WHERE '
                      f'"id" > ? AND "status" <> {INSTANCE_RUNNING} ORDER BY "id" LIMIT ?) AS b')
    delete = prebuilt('DELETE FROM "running_instances" WHERE "id" > ? AND "id" <= ? AND '
                      f'"status" <> {INSTANCE_RUNNING} AND "finished_at" < ?')
    after, total = 0, 0
    while True:
        with write_slice():
            upto = execute(window, (after, PRUNE_BATCH)).fetchone()[0]
            if upto is None:
                return total
            total += execute(delete, (after, upto, cutoff)).rowcount
        after = upto
