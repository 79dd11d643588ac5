"""The deletes retention runs, hand-written (the write path runs them; '?' adapted by
prebuilt): Runs, instances and alert events past their age, and a cron's Runs and
instances beyond its cap, each bounded to a batch."""
from __future__ import annotations

from qlshadow.storage.db.statements import prebuilt
from qlshadow.storage.models import INSTANCE_RUNNING, database

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
CAPS = (("runs", capped_runs, _NEXT_RUN_CRON, _FIRST_RUN_CRON),
         ("instances", capped_instances, _NEXT_INSTANCE_CRON, _FIRST_INSTANCE_CRON))
