"""The SQL the gate reads a window with: per-cron counts of the Runs, the Runs per minute
and by id, the Legacy instances that have no Run, and the accept failures (no Flask).

Runs are read as a range of (accepted_at) or (cron_id, accepted_at), so a week of Runs
costs the same whatever the table holds before or after it; a cron's Legacy instances are
read whole (retention bounds them), through the index on (cron_id, id) the product
already keeps.
"""
from __future__ import annotations

from qlshadow.storage.db import is_sqlite
from qlshadow.storage.models import database
from qlshadow.watch.firing_times import DAY, _sql

# What the gate counts per cron, in one statement for every cron of the report.
_STATS = (
    'SELECT "cron_id", COUNT(*), '
    # A Run has exited exactly when it has finished_at (shadow.run_state).
    'SUM(CASE WHEN "finished_at" IS NOT NULL THEN 1 ELSE 0 END), '
    'SUM(CASE WHEN "finished_at" IS NOT NULL AND "exit_code" <> 0 THEN 1 ELSE 0 END), '
    'SUM(CASE WHEN "created_running" = ? THEN 1 ELSE 0 END), '
    'MIN({revision}), MAX({revision}) '
    'FROM "shadow_runs" WHERE {where} '
    'GROUP BY "cron_id"')
# With several crons on SQLite the window is read as a range of the table's key
# (accepted_at, id): one sequential pass, where the index shadow_runs_cron would cost a
# key lookup per Run; rows of other crons are dropped here.
_BY_KEY = '"accepted_at" >= ? AND "accepted_at" < ?'
_BY_CRON = '"accepted_at" >= ? AND "accepted_at" < ? AND '

# Firings are matched with Runs by minute: shadow_runs_cron (cron_id, accepted_at, id) alone
# answers both (no row is read), the second in its own order.
# Per minute and host: an `each` cron runs once per firing on each host it names, a `one`
# cron once per firing in the whole fleet (core/fleet.py).
_RUN_MINUTES = ('SELECT "accepted_at" / 60, "host_id", COUNT(*) FROM "shadow_runs" '
                'WHERE "cron_id" = ? AND "accepted_at" >= ? AND "accepted_at" < ? '
                'GROUP BY "accepted_at" / 60, "host_id"')
_RUN_IDS = ('SELECT "id" FROM "shadow_runs" WHERE "cron_id" = ? AND "accepted_at" >= ? '
            'AND "accepted_at" < ? ORDER BY "accepted_at", "id"')
# The window's instances are read once, through running_instances_cron (cron_id, id): all of
# each cron's kept instances, which retention bounds (QL_RETENTION_ROWS_PER_CRON,
# QL_RETENTION_DAYS), with started_at filtered row by row. An index on (cron_id, started_at)
# would read only the window, but costs a page written per callback at steady state for an
# on-demand report (docs/SHADOW.md "Cost" has both measured).
# A Legacy instance and its Run come from the same running callback: same cron, pid and
# start second, and task.sh makes the execution id (the Run's accepted_at) from that very
# second. The window's instances are bucketed by day; the Runs are read a day
# at a time (on SQLite as a range of the key: one sequential pass) and joined here. A join
# in SQL, or Runs read per cron through shadow_runs_cron, probes the Run table once per row,
# a key lookup each, several times slower on SQLite.
_RUN_STARTS = ('SELECT "cron_id", "pid", "accepted_at" FROM "shadow_runs" WHERE {where} '
               'AND "started_after" = 0')  # started_at = accepted_at
_INSTANCE_STARTS = ('SELECT "cron_id", "pid", "started_at" FROM "running_instances" '
                    'WHERE {where} AND "started_at" >= ? AND "started_at" < ?')
# shadow_failures is capped (QL3_SHADOW_FAILURE_CAP rows): a scan is bounded.
_FAILURES = ('SELECT "cron_id", "reason", COUNT(*) FROM "shadow_failures" '
             'WHERE "at" >= ? AND "at" < ? GROUP BY "cron_id", "reason"')


def _in(column: str, ids: list) -> str:
    return f'{column} IN ({", ".join(str(int(i)) for i in ids)})' if ids else "1 = 0"


def _runs_where(ids: list, since: int, until: int) -> tuple:
    """The WHERE clause and parameters that select the window's Runs of crons ids."""
    if is_sqlite() and len(ids) > 1:
        return _BY_KEY, [since, until]
    return _BY_CRON + _in('"cron_id"', ids), [since, until]


def run_stats(ids: list, since: int, until: int) -> dict:
    """{cron_id: (runs, exited, failed, finish_only, lowest and highest revision)}."""
    where, params = _runs_where(ids, since, until)
    wanted = set(ids)
    # The revision is stored as bytes; PostgreSQL has no MIN of bytea, so both compare hex.
    revision = ('lower(hex("task_revision"))' if is_sqlite()
                else "encode(\"task_revision\", 'hex')")
    return {row[0]: tuple(int(v) for v in row[1:5]) + tuple(row[5:])
            for row in database.obj.execute_sql(_sql(_STATS.format(where=where,
                                                                   revision=revision)),
                                                [0] + params)
            if row[0] in wanted}


def runs_per_minute(cron_id: int, since: int, until: int):
    """(minute, host id, Runs) of the cron's Runs in [since, until), per minute and host."""
    return database.obj.execute_sql(_sql(_RUN_MINUTES), (cron_id, since, until))


def run_ids(cron_id: int, since: int, until: int):
    """(id,) of each of the cron's Runs in [since, until), in order."""
    return database.obj.execute_sql(_sql(_RUN_IDS), (cron_id, since, until))


def unmatched_instances(ids: list, since: int, until: int) -> tuple:
    """({cron_id: Legacy instances started in the window with no Run of the same start},
    {cron_id: start times of its instances in the window})."""
    execute = database.obj.execute_sql
    by_day: dict = {}
    starts_by_cron: dict = {}
    for row in execute(_sql(_INSTANCE_STARTS.format(where=_in('"cron_id"', ids))),
                       (since, until)):
        by_day.setdefault((row[2] - since) // DAY, []).append(tuple(row))
        starts_by_cron.setdefault(row[0], []).append(row[2])
    found: dict = {}
    for day, instances in sorted(by_day.items()):
        lo = since + day * DAY
        where, params = _runs_where(ids, lo, min(until, lo + DAY))
        starts = set(execute(_sql(_RUN_STARTS.format(where=where)), params))
        for row in instances:
            if row not in starts:
                found[row[0]] = found.get(row[0], 0) + 1
    return found, starts_by_cron


def accept_failures(since: int, until: int) -> dict:
    """{cron_id or None: {reason: count}} of accept failures recorded in the window."""
    found: dict = {}
    for cron_id, reason, count in database.obj.execute_sql(_sql(_FAILURES), (since, until)):
        found.setdefault(cron_id, {})[reason] = int(count)
    return found
