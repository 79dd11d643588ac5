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
"""
from __future__ import annotations

import calendar
import itertools
import os
import re
from dataclasses import dataclass

from qlshadow.storage.db import prebuilt
from qlshadow.storage.models import INSTANCE_RUNNING, database

DAY = 86400
# Every PRUNE_EVERY callbacks a step deletes at most WRITE_BATCH rows per rule: one row per
# callback, twice what callbacks add (an execution is two callbacks, one Run and one
# instance), so the write path keeps up; and a few pages per step, never a long lock.
PRUNE_EVERY = 64
WRITE_BATCH = 64
PRUNE_BATCH = 64    # rows per transaction in `qlshadow prune`: callbacks wait at most that
LOG_NAME = re.compile(r"(\d{4})-(\d\d)-(\d\d)-(\d\d)-(\d\d)-(\d\d)-\d+\.log")


@dataclass(frozen=True)
class Policy:
    """The retention settings in force; 0 switches a limit off."""
    days: int = 0
    rows_per_cron: int = 0
    logs_per_cron: int = 0
    log_days: int = 0
    log_dir: str = ""
    budget: int = 0  # bytes (storage_use); 0: none
    db_path: str = ""  # the SQLite file the budget covers

    @property
    def rows_on(self) -> bool:
        return bool(self.days or self.rows_per_cron or self.budget)

    @property
    def logs_on(self) -> bool:
        return bool(self.log_dir and (self.logs_per_cron or self.log_days))


# --- the prune reserve ----------------------------------------------------------------------

# A file of RESERVE_BYTES in the data dir that `qlshadow prune` deletes first when the
# partition is (nearly) full: SQLite needs room in the WAL to delete rows, so a prune on a
# full disk would otherwise fail like every other write. Random bytes, because UBIFS and
# JFFS2 (OpenWrt's overlay) compress: zeros would hold back almost nothing. It covers the
# WAL prune keeps (PRUNE_WAL_PAGES) plus its largest transaction, with room to spare.
RESERVE_NAME = "prune.reserve"
RESERVE_BYTES = 512 * 1024
PRUNE_WAL_PAGES = 16


def reserve_path(data_dir: str) -> str:
    """Where the data dir's prune reserve lives."""
    return os.path.join(data_dir, RESERVE_NAME)


def make_reserve(data_dir: str) -> str:
    """Make the reserve file unless it is there; returns "in place" or why it is not.

    Written whole or not at all (a partial file on a full disk is removed again), written
    only when missing (a router's flash pays for every write), and only while at least
    twice its size is free: the reserve must never be what fills the partition.
    """
    path = reserve_path(data_dir)
    try:
        if os.path.getsize(path) >= RESERVE_BYTES:
            return "in place"
    except OSError:
        pass
    try:
        os.makedirs(data_dir, mode=0o700, exist_ok=True)
        stat = os.statvfs(data_dir)
        if stat.f_bavail * stat.f_frsize < RESERVE_BYTES * 2:
            return f"not made: less than {RESERVE_BYTES * 2 // 1024} KiB free"
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as fh:
            for _ in range(RESERVE_BYTES // 65536):
                fh.write(os.urandom(65536))
            fh.flush()
            os.fsync(fh.fileno())
        return "in place"
    except OSError as exc:
        try:
            os.unlink(path)
        except OSError:
            pass
        return f"not made: {exc.strerror or exc}"


def release_reserve(data_dir: str) -> bool:
    """Delete the reserve when the data dir's partition has less free than it holds."""
    path = reserve_path(data_dir)
    try:
        stat = os.statvfs(data_dir)
        if stat.f_bavail * stat.f_frsize >= RESERVE_BYTES * 2:
            return False
        os.unlink(path)
        return True
    except OSError:
        return False


def policy_of(settings) -> Policy:
    """The retention policy of settings (the budget only on SQLite: it counts its files)."""
    from qlshadow.config import sqlite_file
    path = sqlite_file(settings.db_url)
    return Policy(settings.retention_days, settings.retention_rows_per_cron,
                  settings.retention_logs_per_cron, settings.retention_log_days,
                  settings.log_dir, settings.storage_budget if path else 0, path or "")


# The newest possible cutoff: with it the age rules delete the oldest finished rows.
ANY_AGE = 2 ** 62
LOG_BYTES_EVERY = 16  # write-path steps between two walks of the task logs


def log_bytes(log_dir: str) -> int:
    """Bytes of the files in the task log folders (one level down, as task.sh writes)."""
    total = 0
    try:
        folders = [e.path for e in os.scandir(log_dir) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return 0
    for folder in folders:
        try:
            total += sum(e.stat(follow_symlinks=False).st_size for e in os.scandir(folder)
                         if e.is_file(follow_symlinks=False))
        except OSError:
            continue
    return total


def database_bytes(db_path: str) -> tuple:
    """(bytes of the SQLite pages in use, bytes of its WAL): deleting rows frees pages
    that later writes reuse, so the pages in use, not the file's size, are what a budget
    can hold down (the file shrinks only by VACUUM)."""
    execute = database.obj.execute_sql
    pages = execute("PRAGMA page_count").fetchone()[0]
    free = execute("PRAGMA freelist_count").fetchone()[0]
    size = execute("PRAGMA page_size").fetchone()[0]
    try:
        wal = os.stat(db_path + "-wal").st_size
    except OSError:
        wal = 0
    return (pages - free) * size, wal


def storage_use(policy: Policy, logs: int | None = None) -> dict:
    """Use against the budget: {"used_bytes", "budget_bytes", "database_bytes",
    "wal_bytes", "log_bytes"}; logs: task log bytes when already known.

    The WAL counts up to its checkpoint point: it is reused in place, and beyond that it
    only grows while a reader holds a snapshot and is cut back at a checkpoint; counting
    that would delete history for good to pay for a moment's WAL.
    """
    from qlshadow.storage.db import WAL_CHECKPOINT_BYTES
    db_used, wal = database_bytes(policy.db_path) if policy.db_path else (0, 0)
    logs = log_bytes(policy.log_dir) if logs is None else logs
    counted_wal = min(wal, WAL_CHECKPOINT_BYTES * 1048 // 1024)  # with frame headers
    return {"used_bytes": db_used + counted_wal + logs, "budget_bytes": policy.budget,
            "database_bytes": db_used, "wal_bytes": wal, "log_bytes": logs}


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
            for table, capped, next_sql, first_sql in _CAPS:
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


# --- the statements (hand-written: the write path runs them; '?' adapted by prebuilt) ----

# Age counts on the server's clock: a Run goes when it both was accepted (router clock, in
# the execution id) and exited (server clock) before the cutoff, so a task clock that was
# far behind before NTP never makes a fresh Run look old. Oldest first by the table's key,
# looking at no more than `limit` exited Runs per step: the step finds the first exited Run
# beyond them and deletes below it, a range of the key. (Not "key IN (subquery)": SQLite
# 3.40 looks a row value of an integer and a text column up by its first column only.)
_EXPIRED_RUNS_STOP = ('SELECT "accepted_at", "id" FROM "shadow_runs" WHERE "accepted_at" < ? '
                      'AND "finished_at" IS NOT NULL ORDER BY "accepted_at", "id" LIMIT 1 OFFSET ?')
_EXPIRED_RUNS = ('DELETE FROM "shadow_runs" WHERE ("accepted_at", "id") < (?, ?) AND '
                 '"finished_at" < ?')
# Ids grow with insertion time, so the oldest finished rows come first by primary key;
# running rows are skipped (they may still finish) and only those finished before the
# cutoff among the first `limit` are deleted, so a step reads a bounded number of rows.
_EXPIRED_INSTANCES = ('DELETE FROM "running_instances" WHERE "id" IN (SELECT "id" FROM '
                      f'"running_instances" WHERE "status" <> {INSTANCE_RUNNING} ORDER BY "id" '
                      'LIMIT ?) AND "finished_at" < ?')
# Events are few (one per change of a cron's alert state), and ids grow with time: the
# oldest `limit` by id are read, and those older than the cutoff deleted.
_EXPIRED_ALERT_EVENTS = ('DELETE FROM "alert_events" WHERE "id" IN (SELECT "id" FROM '
                         '"alert_events" ORDER BY "id" LIMIT ?) AND "at" < ?')
# The newest `cap` rows of a cron end at the cap-th row from the top (shadow_runs_cron,
# running_instances_cron): everything below it goes, oldest first, a batch at a time.
_RUN_BOUNDARY = ('SELECT "accepted_at", "id" FROM "shadow_runs" WHERE "cron_id" = ? '
                 'ORDER BY "accepted_at" DESC, "id" DESC LIMIT 1 OFFSET ?')
_CAPPED_RUNS_STOP = ('SELECT "accepted_at", "id" FROM "shadow_runs" WHERE "cron_id" = ? AND '
                     '("accepted_at", "id") < (?, ?) ORDER BY "accepted_at", "id" '
                     'LIMIT 1 OFFSET ?')
_CAPPED_RUNS = 'DELETE FROM "shadow_runs" WHERE "cron_id" = ? AND ("accepted_at", "id") < (?, ?)'
_INSTANCE_BOUNDARY = ('SELECT "id" FROM "running_instances" WHERE "cron_id" = ? '
                      'ORDER BY "id" DESC LIMIT 1 OFFSET ?')
_CAPPED_INSTANCES = ('DELETE FROM "running_instances" WHERE "id" IN (SELECT "id" FROM '
                     '"running_instances" WHERE "cron_id" = ? AND "id" < ? ORDER BY "id" LIMIT ?)')
_NEXT_RUN_CRON = ('SELECT "cron_id" FROM "shadow_runs" WHERE "cron_id" > ? '
                  'ORDER BY "cron_id" LIMIT 1')
_FIRST_RUN_CRON = 'SELECT "cron_id" FROM "shadow_runs" ORDER BY "cron_id" LIMIT 1'
_NEXT_INSTANCE_CRON = ('SELECT "cron_id" FROM "running_instances" WHERE "cron_id" > ? '
                       'ORDER BY "cron_id" LIMIT 1')
_FIRST_INSTANCE_CRON = 'SELECT "cron_id" FROM "running_instances" ORDER BY "cron_id" LIMIT 1'


def expired_runs(cutoff: int, limit: int) -> int:
    """Delete, among the oldest limit exited Runs, those accepted and exited before cutoff."""
    execute = database.obj.execute_sql
    # With no more than limit of them, all are in reach: below (cutoff, b"") is before cutoff.
    stop = execute(prebuilt(_EXPIRED_RUNS_STOP), (cutoff, limit)).fetchone() or (cutoff, b"")
    return execute(prebuilt(_EXPIRED_RUNS), (*stop, cutoff)).rowcount


def expired_instances(cutoff: int, limit: int) -> int:
    """Delete finished instances older than cutoff among the oldest limit finished ones."""
    return database.obj.execute_sql(prebuilt(_EXPIRED_INSTANCES), (limit, cutoff)).rowcount


def expired_alert_events(cutoff: int, limit: int) -> int:
    """Delete alert events older than cutoff among the oldest limit (with their deliveries)."""
    return database.obj.execute_sql(prebuilt(_EXPIRED_ALERT_EVENTS), (limit, cutoff)).rowcount


def capped_runs(cron_id: int, cap: int, limit: int) -> int:
    """Delete up to limit of a cron's Runs beyond its newest cap; returns how many."""
    execute = database.obj.execute_sql
    boundary = execute(prebuilt(_RUN_BOUNDARY), (cron_id, cap - 1)).fetchone()
    if boundary is None:
        return 0
    stop = execute(prebuilt(_CAPPED_RUNS_STOP), (cron_id, *boundary, limit)).fetchone()
    return execute(prebuilt(_CAPPED_RUNS), (cron_id, *(stop or boundary))).rowcount


def capped_instances(cron_id: int, cap: int, limit: int) -> int:
    """Delete up to limit of a cron's instances beyond its newest cap; returns how many."""
    execute = database.obj.execute_sql
    boundary = execute(prebuilt(_INSTANCE_BOUNDARY), (cron_id, cap - 1)).fetchone()
    if boundary is None:
        return 0
    return execute(prebuilt(_CAPPED_INSTANCES), (cron_id, boundary[0], limit)).rowcount


# The per-cron caps the write path takes turns on: (cursor, delete, next cron, first cron).
_CAPS = (("runs", capped_runs, _NEXT_RUN_CRON, _FIRST_RUN_CRON),
         ("instances", capped_instances, _NEXT_INSTANCE_CRON, _FIRST_INSTANCE_CRON))


# --- task logs ------------------------------------------------------------------------------

def log_stamp(name: str) -> int | None:
    """Seconds (UTC reading of the local stamp; only compared) of a task log's file name."""
    match = LOG_NAME.fullmatch(name)
    if not match:
        return None
    y, mo, d, h, mi, s = (int(g) for g in match.groups())
    if not (1 <= mo <= 12 and 1 <= d <= 31):
        return None  # not a stamp task.sh writes: the file is left alone
    return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))


def prune_log_folder(folder: str, policy: Policy, now: int, limit: int | None) -> tuple:
    """Delete a cron's task logs beyond the count or age kept; returns (files, bytes).

    Only files named like task.sh names them are considered, newest first by that name;
    the newest is always kept (its task may still be writing to it).
    """
    try:
        names = sorted((n for n in os.listdir(folder) if log_stamp(n) is not None), reverse=True)
    except OSError:
        return 0, 0
    cutoff = now - policy.log_days * DAY if policy.log_days else None
    doomed = []
    for position, name in enumerate(names[1:], 1):
        if (policy.logs_per_cron and position >= policy.logs_per_cron) or (
                cutoff is not None and log_stamp(name) < cutoff):
            doomed.append(name)
    files = freed = 0
    for name in reversed(doomed):  # oldest first, so a bounded step takes the oldest
        if limit is not None and files >= limit:
            break
        path = os.path.join(folder, name)
        try:
            size = os.lstat(path).st_size
            os.unlink(path)
        except OSError:
            continue
        files += 1
        freed += size
    return files, freed


# --- `qlshadow prune` -----------------------------------------------------------------------

def prune(settings, now: int, released: bool = False) -> dict:
    """Delete everything due now, in short transactions; returns what was deleted.

    On a (nearly) full partition the reserve file goes first, then task logs: both free the
    space the database needs to delete. The WAL is kept small while deleting, then
    checkpointed and truncated, giving its space back; the reserve is made again last.
    `released` says the caller released the reserve already (before opening the database,
    which on SQLite needs room for its shared-memory file).
    """
    from qlshadow.storage.db import checkpoint, connected, is_sqlite, write_slice, write_transaction
    from qlshadow.storage.models import Token

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
    from qlshadow.storage.db import write_slice
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
    from qlshadow.storage.db import write_slice
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
