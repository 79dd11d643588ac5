#!/usr/bin/env python3
"""Time the reconciliation gate over a week of 100 crons in a table of 1,000,000 Runs.

Fills a fresh SQLite database directly (the product's schema, then plain INSERTs: going
through the callback API would take hours), with a Legacy instance beside every Run, a
history reaching back as far as 1,000,000 Runs go, and a few defects of every kind. Then
calls qlshadow.watch.reconcile.reconcile() over the last 7 days and prints the times.

The crons are a router-like mix (every minute, every 5 and 15 minutes, hourly, daily), so
the week holds about 112,000 firings; the rest of the table is older history. The schema is
the product's own (schema.upgrade_schema): the bench creates no index of its own, so it
times what ships.

Usage: scripts/bench_reconcile.py [--runs N] [--repeat K] [--keep PATH] [--pg-url URL]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# (schedule, how many crons, seconds between firings, first firing after midnight UTC):
# 100 crons. The script runs in UTC so that the schedules mean what the history says.
MIX = (("* * * * *", 5, 60, 0), ("*/5 * * * *", 20, 300, 0), ("*/15 * * * *", 25, 900, 0),
       ("0 * * * *", 25, 3600, 0), ("30 3 * * *", 25, 86400, 3 * 3600 + 1800))
WEEK = 7 * 86400


# The order of the Run tuples built in fill(): every field of the logical Run.
FULL_RUN = ("project_id", "idempotency_key", "id", "attempt_id", "request_id", "task_identity",
            "cron_id", "task_revision", "origin", "trigger_type", "triggered_by",
            "execution_owner", "accepted_at", "state", "pid", "log_path", "started_at",
            "finished_at", "exit_code", "events", "recorded_at")


def _import():
    try:
        import qlshadow  # noqa: F401
    except ImportError:
        sys.exit("qlshadow is not importable: run with the repository's .venv/bin/python")


def fill(database, runs_wanted: int, now: int) -> dict:
    from qlshadow.storage.models import Cron
    from qlshadow.core.shadow.ids import attempt_id, revision_doc, run_id, task_revision
    execute = database.execute_sql
    param = database.param
    q = lambda sql: sql.replace("?", param)  # noqa: E731
    crons = []
    start_of_history = now
    with database.atomic():
        for schedule, count, period, offset in MIX:
            for _ in range(count):
                n = len(crons) + 1
                name = f"job{n}"
                cron_id = Cron.insert(name=name, command=f"run {name}", schedule=schedule,
                                      created_at=0, updated_at=0).execute()
                revision = task_revision(revision_doc(name, f"run {name}", schedule))
                crons.append((cron_id, period, offset, revision))
    per_week = sum(WEEK // period for _, period, _, _ in crons)
    weeks = -(-runs_wanted // per_week)
    # Newest first per cron, until the table holds runs_wanted Runs.
    plan = []
    for cron_id, period, offset, revision in crons:
        last = (now - 60 - offset) // period * period + offset
        first = last - weeks * WEEK
        plan.extend((at, cron_id, revision) for at in range(last, first, -period))
    plan.sort(reverse=True)
    plan = plan[:runs_wanted]
    start_of_history = plan[-1][0]
    # Runs are built below with every field of the logical Run (schema.RunV1's columns, in
    # FULL_RUN order) and stored as the writer stores them (schema.MOVED).
    from qlshadow.storage import schema
    columns = ", ".join(f'"{c}"' for c in schema.MOVED)
    runs_sql = q(f'INSERT INTO "shadow_runs" ({columns}) '
                 f'VALUES ({", ".join("?" * len(schema.MOVED))})')

    def slim(rows: list) -> list:
        return [schema._slim(tuple(dict(zip(FULL_RUN, r, strict=True))[c] for c in schema.MOVE_COLUMNS))
                for r in rows]
    inst_sql = q('INSERT INTO "running_instances" ("cron_id", "pid", "log_path", "started_at", '
                 '"finished_at", "status", "exit_code") VALUES (?, ?, ?, ?, ?, ?, ?)')
    defects = {"missed": 0, "finish_only": 0, "stuck": 0, "double": 0, "manual": 0}
    batch_runs, batch_inst = [], []
    for i, (at, cron_id, revision) in enumerate(plan):
        began = at + 1
        pid = 1000 + i % 30000
        kind = i % 5003
        if kind == 1:
            defects["missed"] += 1
            continue
        eid = f"legacy-system:{began}:{uuid.uuid4()}"
        log = f"job{cron_id}/{began}.log"
        if kind == 2:  # lost start: no instance, no running event
            defects["finish_only"] += 1
            events = f"accepted@{began + 2} spawned@{began + 2} exited@{began + 2}"
            state, finished = "exited", began + 2
        elif kind == 3:  # lost finish
            defects["stuck"] += 1
            events, state, finished = f"accepted@{began} spawned@{began} running@{began}", "running", None
        else:
            events, state, finished = (f"accepted@{began} spawned@{began} running@{began} "
                                       f"exited@{began + 2}"), "exited", began + 2
        batch_runs.append(("default", eid, run_id(eid, began), attempt_id(eid, began), eid,
                           f"legacy-cron:{cron_id}", cron_id, revision, "scheduled_system",
                           "scheduled_system", "legacy:system-crond", "legacy", began, state,
                           pid, log, began, finished, 0 if finished else None, events, began))
        if kind != 2:
            batch_inst.append((cron_id, pid, log, began, finished, 1 if finished else 0,
                               0 if finished else None))
        if kind == 4:  # a second daemon in the same minute
            defects["double"] += 1
            eid2 = f"legacy-system:{began + 1}:{uuid.uuid4()}"
            batch_runs.append(("default", eid2, run_id(eid2, began + 1), attempt_id(eid2, began + 1),
                               eid2, f"legacy-cron:{cron_id}", cron_id, revision,
                               "scheduled_system", "scheduled_system", "legacy:system-crond",
                               "legacy", began + 1, "exited", pid + 1, log, began + 1, began + 3, 0,
                               events, began + 1))
            batch_inst.append((cron_id, pid + 1, log, began + 1, began + 3, 1, 0))
        if kind == 5:  # a manual run: Legacy only
            defects["manual"] += 1
            batch_inst.append((cron_id, 7, log, began + 20, began + 22, 1, 0))
        if len(batch_runs) >= 20000:
            with database.atomic():
                database.cursor().executemany(runs_sql, slim(batch_runs))
                database.cursor().executemany(inst_sql, batch_inst)
            batch_runs, batch_inst = [], []
            print(f"  {i + 1:,} of {len(plan):,}", file=sys.stderr, end="\r")
    with database.atomic():
        database.cursor().executemany(runs_sql, slim(batch_runs))
        database.cursor().executemany(inst_sql, batch_inst)
    if database.param == "?":
        execute("ANALYZE")
    else:  # the steady state autovacuum keeps: statistics and a visibility map
        for table in ("shadow_runs", "running_instances"):
            execute(f"VACUUM ANALYZE {table}")
    print(file=sys.stderr)
    return {"crons": len(crons), "history_from": start_of_history, "defects": defects}


def count(database, sql: str, *params) -> int:
    return database.execute_sql(sql.replace("?", database.param), params).fetchone()[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", metavar="PATH", help="SQLite file to create and keep")
    parser.add_argument("--pg-url", metavar="URL", help="an empty PostgreSQL database instead")
    args = parser.parse_args()
    _import()
    os.environ["TZ"] = "UTC"
    time.tzset()
    from qlshadow.storage import db, schema
    from qlshadow.watch.reconcile import reconcile
    tmp = None
    if args.pg_url:
        url = args.pg_url
    else:
        path = args.keep or os.path.join(tmp := tempfile.mkdtemp(prefix="bench-reconcile-"), "q.db")
        if os.path.exists(path):
            sys.exit(f"{path} exists; give a new path")
        url = f"sqlite:///{path}"
    database = db.make_database(url, 30)
    db.bind(database)
    schema.upgrade_schema()
    now = int(time.time())
    with database.connection_context():
        started = time.perf_counter()
        info = fill(database, args.runs, now)
        filled = time.perf_counter() - started
        runs = count(database, 'SELECT COUNT(*) FROM "shadow_runs"')
        in_week = count(database, 'SELECT COUNT(*) FROM "shadow_runs" WHERE "accepted_at" >= ?',
                        now - WEEK)
        instances = count(database, 'SELECT COUNT(*) FROM "running_instances"')
    print(f"database: {db.describe(database)}; filled in {filled:.0f} s")
    print(f"table: {runs:,} Runs and {instances:,} Legacy instances over "
          f"{(now - info['history_from']) / 86400:.1f} days, {info['crons']} crons; "
          f"{in_week:,} Runs in the last 7 days")
    times = []
    data = None
    for _ in range(args.repeat):
        database.close()  # a cold connection each time, as a CLI call has
        with database.connection_context():
            started = time.perf_counter()
            data = reconcile(now - WEEK, now, now=now)
            times.append(time.perf_counter() - started)
    expected = sum(r["expected"] for r in data["crons"])
    found = {k: sum(len(r[k]) + r[k + "_omitted"] if k in ("missed", "double") else r[k]
                    for r in data["crons"])
             for k in ("missed", "double", "finish_only", "stuck", "unmatched_instances")}
    print(f"reconcile 7 days x {len(data['crons'])} crons: {expected:,} firings judged; "
          f"gate {data['gate']['verdict']}; found {found}")
    print(f"time: first {times[0] * 1000:.0f} ms, median {statistics.median(times) * 1000:.0f} ms, "
          f"max {max(times) * 1000:.0f} ms over {len(times)} calls")
    if tmp and not args.keep:
        import shutil
        shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
