#!/usr/bin/env python3
"""Time the health read (qlshadow.watch.health.read_all) for 50 crons with 1,000 Runs each.

Fills a fresh database directly (the product's schema, then the models' bulk inserts), with a Legacy
instance beside every Run, crons of a router-like mix of schedules and a few failing,
stuck or missed ones, then times read_all() on a warm connection, as the API, the
status command and /metrics call it. The budget (docs/CONTRACT.md §13.1) is 50 ms.

Usage: scripts/bench_health.py [--crons N] [--runs-per-cron N] [--repeat K] [--distinct]
                               [--pg-url URL]
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

# (schedule, seconds between firings): cycled over the crons.
MIX = (("* * * * *", 60), ("*/5 * * * *", 300), ("*/15 * * * *", 900), ("0 * * * *", 3600),
       ("30 3 * * *", 86400))


def fill(database, crons: int, per_cron: int, now: int, distinct: bool = False) -> None:
    """Crons with per_cron Runs each and a Legacy instance beside every Run, written through
    the shipped models in the shape the Shadow writer stores (one slim Run row each)."""
    from qlshadow.core.shadow.ids import (request_uuid, revision_doc, run_id, task_revision,
                                          uuid_bytes)
    from qlshadow.storage.models import Cron, RunningInstance, ShadowRun
    for n in range(crons):
        schedule, period = MIX[n % len(MIX)]
        offset = 1800 + 3 * 3600 if period == 86400 else 0
        if distinct:  # no two crons share a schedule: each one's firings are evaluated
            schedule, period, offset = f"{n % 60} * * * *", 3600, (n % 60) * 60
        name = f"job{n + 1}"
        with database.atomic():
            cron_id = Cron.insert(name=name, command=f"run {name}", schedule=schedule,
                                  created_at=0, updated_at=0).execute()
        revision = bytes.fromhex(task_revision(revision_doc(name, f"run {name}", schedule)))
        last = (now - 60) // period * period + offset
        last = last if last <= now - 60 else last - period
        if n % 10 == 3:
            last -= 3 * period  # missed its last firings
        runs, instances = [], []
        for k in range(per_cron):
            began = last - k * period + 1
            eid = f"legacy-system:{began}:{uuid.uuid4()}"
            stuck = n % 10 == 7 and k == 0
            code = 1 if n % 10 == 5 and k < 3 else 0
            finished = None if stuck else began + 2
            pid = 1000 + k % 30000
            log = f"{name}/{began}.log"
            runs.append({"accepted_at": began, "id": uuid_bytes(run_id(eid, began)),
                         "request_uuid": request_uuid(eid), "cron_id": cron_id,
                         "task_revision": revision, "origin": 0, "pid": pid, "log_path": log,
                         "started_after": 0, "finished_at": finished,
                         "exit_code": None if stuck else code, "created_after": 0,
                         "created_running": 1})
            instances.append({"cron": cron_id, "pid": pid, "log_path": log,
                              "started_at": began, "finished_at": finished,
                              "status": 0 if stuck else 1,
                              "exit_code": None if stuck else code})
        instances.reverse()  # oldest first, so ids grow with time as callbacks make them
        with database.atomic():
            for batch in range(0, len(runs), 500):
                ShadowRun.insert_many(runs[batch:batch + 500]).execute()
                RunningInstance.insert_many(instances[batch:batch + 500]).execute()
    if database.param == "?":
        database.execute_sql("ANALYZE")
    else:
        for table in ("shadow_runs", "running_instances", "crons"):
            database.execute_sql(f"VACUUM ANALYZE {table}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crons", type=int, default=50)
    parser.add_argument("--runs-per-cron", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--distinct", action="store_true",
                        help="give every cron its own schedule (hourly, each at its own minute)")
    parser.add_argument("--pg-url", metavar="URL", help="an empty PostgreSQL database instead")
    args = parser.parse_args()
    os.environ["TZ"] = "UTC"
    time.tzset()
    from qlshadow.storage import db
    from qlshadow.watch import health
    tmp = tempfile.mkdtemp(prefix="bench-health-")  # the data dir, and the SQLite file's
    url = args.pg_url or f"sqlite:///{tmp}/q.db"
    from qlshadow import config
    settings = config.load(environ={"QL_DATA_DIR": tmp, "QL_DB_URL": url,
                                    "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": ""})
    database, _ = db.open_database(settings)  # the product's schema, as serve makes it
    now = int(time.time())
    with database.connection_context():
        fill(database, args.crons, args.runs_per_cron, now, args.distinct)
        health.read_all(now)  # warm: imports, the schedule evaluator and the page cache
        times, cpu, found = [], [], None
        for _ in range(args.repeat):
            started, started_cpu = time.perf_counter(), time.process_time()
            found = health.read_all(now)
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
        counted = time.perf_counter()
        health.read_all(now, count_missed=True)
        with_missed = time.perf_counter() - counted
        from qlshadow.watch.metrics import cron_failures
        counted = time.perf_counter()
        cron_failures()  # /metrics' other per-cron read: a count over the stored instances
        failures = time.perf_counter() - counted
    states: dict = {}
    for h in found:
        states[h["state"]] = states.get(h["state"], 0) + 1
    print(f"database: {db.describe(database)}; {args.crons} crons x {args.runs_per_cron} Runs "
          f"and as many Legacy instances")
    print(f"states: {states}")
    print(f"read_all: median {statistics.median(times) * 1000:.1f} ms "
          f"(CPU {statistics.median(cpu) * 1000:.1f} ms), "
          f"max {max(times) * 1000:.1f} ms over {len(times)} calls; "
          f"with missed counts (/metrics) {with_missed * 1000:.1f} ms; "
          f"failures count (/metrics) {failures * 1000:.1f} ms")
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
