#!/usr/bin/env python3
"""Storage figures of qlshadow, side by side in one run (docs/PERFORMANCE.md, "Storage").

  flat      1,000,000 callbacks (500,000 executions) with the default retention, Shadow
            on, SQLite: database + WAL bytes sampled as they go. Driven in-process through
            the callback's own functions (apply_status_callback, observe, Pruner.on_write,
            inside write_transaction) with a simulated clock, not over HTTP: a million
            requests would take hours on a shared machine, and storage does not depend on
            the transport.
  latency   GET /open/runs?cron_id=N&limit=50 (and the unfiltered list and one Run by id)
            over 10,000 and 1,000,000 stored Runs, through the Flask app in-process, timed
            side by side; the Runs are bulk-inserted rows of the same shape.
  steady    bytes written per callback (counted at write(2): /proc/self/io wchar) and
            database bytes per kept Run at steady state: 20 crons every minute, default
            retention, Shadow on and off, driven in-process like flat. --baseline DIR runs
            the same in a child process on another tree of the code (`git archive <commit>
            app | tar -x -C DIR`), side by side in one run.
  cost      callbacks/s and bytes written per callback over HTTP, servers from bench.py
            interleaved in rounds: retention on (defaults, and a small cap that deletes on
            every step) vs off, and the product with the read indexes dropped (the
            write-amplification "before").

Every part runs by default; --only picks some. Prints a table, writes a JSON file.
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import bench  # noqa: E402  (the sibling harness: servers, crond waves, the HTTP driver)

START = 1_764_460_800
NEW_INDEXES = ("running_instances_cron", "shadow_runs_accepted", "shadow_runs_cron")
RETENTION_OFF = {"QL_RETENTION_DAYS": "0", "QL_RETENTION_ROWS_PER_CRON": "0",
                 "QL_RETENTION_LOGS_PER_CRON": "0", "QL_RETENTION_LOG_DAYS": "0"}


def load_app(data_dir: str, env: dict, pragmas: tuple = ()):
    """The product app over a SQLite file in data_dir (in-process); pragmas go to
    Settings.sqlite_pragmas (a page_size there is the new file's)."""
    import dataclasses

    from qlshadow import config
    from qlshadow.web.views import create_app
    settings = config.load(environ={"QL_DATA_DIR": data_dir, "QL_SCHEDULER": "node",
                                    "QL_CRONTAB_INSTALL": "",
                                    "QL3_SHADOW_ORIGINS": "scheduled_system", **env})
    if pragmas:  # (a --baseline tree may predate the field; it is asked for none)
        settings = dataclasses.replace(settings, sqlite_pragmas=pragmas)
    return create_app(settings), settings


def sizes(path: str) -> tuple:
    wal = path + "-wal"
    return os.path.getsize(path), os.path.getsize(wal) if os.path.exists(wal) else 0


# --- flat: a million callbacks with the default retention ----------------------------------

def flat(base: str, callbacks: int, crons: int, every: int) -> dict:
    from qlshadow import config
    from qlshadow.storage import db, retention
    from qlshadow.core.legacy import apply_status_callback, parse_status_callback
    from qlshadow.storage.models import Cron, RunningInstance, ShadowRun
    from qlshadow.core.shadow.writer import observe

    data = os.path.join(base, "flat")
    app, settings = load_app(data, {})
    path = config.sqlite_file(settings.db_url)
    with db.database.connection_context(), db.write_transaction():
        ids = [Cron.insert(name=f"job{n}", command=f"task job{n}.sh", schedule="* * * * *",
                           created_at=START, updated_at=START).execute() for n in range(crons)]
    pruner = retention.Pruner(retention.policy_of(settings))
    samples, executions, began = [], callbacks // 2, time.monotonic()
    with db.database.connection_context():
        for n in range(executions):
            cron_id = ids[n % crons]
            minute = START + 60 * (n // crons)  # every cron fires once a simulated minute
            eid = f"legacy-system:{minute}:{n & 0xffffffff:08x}-9d4a-4e6b-8f1a-{n:012x}"
            for status, now in ((0, minute), (1, minute + 30)):
                cb = parse_status_callback({
                    "ids": [cron_id], "status": status, "pid": 1000 + n % 30000,
                    "log_path": f"job/{n}.log", "last_execution_time": minute,
                    "last_running_time": 30, "exit_code": 0, "execution_id": eid})
                with db.write_transaction():
                    observe(cb, apply_status_callback(cb, now), now, settings.failure_cap)
                    pruner.on_write(now)
            if (n + 1) * 2 % every == 0:
                db_bytes, wal_bytes = sizes(path)
                samples.append({"callbacks": (n + 1) * 2,
                                "simulated_days": round((minute - START) / 86400, 1),
                                "db_bytes": db_bytes, "wal_bytes": wal_bytes,
                                "runs": ShadowRun.select().count(),
                                "instances": RunningInstance.select().count()})
                bench.progress(f"flat: {samples[-1]}")
    tail = [s["db_bytes"] + s["wal_bytes"] for s in samples[len(samples) // 2:]]
    return {"callbacks": executions * 2, "crons": crons, "seconds": round(time.monotonic() - began, 1),
            "samples": samples, "second_half_min_bytes": min(tail), "second_half_max_bytes": max(tail)}


# --- steady: bytes per callback and per kept Run once retention holds the size -------------

def wchar() -> int:
    """Bytes this process has passed to write(2) and friends so far."""
    with open("/proc/self/io") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("wchar:"))


def steady_one(base: str, shadow: bool, crons: int, warm_minutes: int, minutes: int,
               page_size: int = 0, checkpoint_pages: int = 0) -> dict:
    """One configuration on the code qlshadow imports from: warm up past the retention cap,
    then count the bytes of `minutes` more minutes of callbacks. page_size and
    checkpoint_pages (when not 0) try another SQLite page size or WAL checkpoint point."""
    from qlshadow import config
    from qlshadow.storage import db, retention
    pragmas = tuple((key, value) for key, value in (("page_size", page_size),
                                                     ("wal_autocheckpoint", checkpoint_pages)) if value)
    from qlshadow.core.legacy import apply_status_callback, parse_status_callback
    from qlshadow.storage.models import Cron, RunningInstance, ShadowRun
    from qlshadow.core.shadow.writer import observe

    data = os.path.join(base, f"steady-{'on' if shadow else 'off'}")
    app, settings = load_app(data, {} if shadow else {"QL3_SHADOW_ORIGINS": ""}, pragmas)
    path = config.sqlite_file(settings.db_url)
    with db.database.connection_context(), db.write_transaction():
        ids = [Cron.insert(name=f"job{n}", command=f"task job{n}.sh", schedule="* * * * *",
                           created_at=START, updated_at=START).execute() for n in range(crons)]
    pruner = retention.Pruner(retention.policy_of(settings))
    written, counted = 0, 0
    with db.database.connection_context():
        for minute_n in range(warm_minutes + minutes):
            measuring = minute_n >= warm_minutes
            minute = START + 60 * minute_n
            before = wchar()
            for c, cron_id in enumerate(ids):
                n = minute_n * crons + c
                eid = f"legacy-system:{minute}:{n & 0xffffffff:08x}-9d4a-4e6b-8f1a-{n:012x}"
                for status, now in ((0, minute), (1, minute + 30)):
                    cb = parse_status_callback({
                        "ids": [cron_id], "status": status, "pid": 1000 + n % 30000,
                        "log_path": f"/opt/ql/log/job{c}/{minute}.log",
                        "last_execution_time": minute, "last_running_time": 30,
                        "exit_code": 0, "execution_id": eid})
                    with db.write_transaction():
                        result = apply_status_callback(cb, now)
                        if shadow:
                            observe(cb, result, now, settings.failure_cap)
                        pruner.on_write(now)
            if measuring:
                written += wchar() - before
                counted += 2 * crons
        runs = ShadowRun.select().count()
        instances = RunningInstance.select().count()
        db.database.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = db.database.execute_sql("PRAGMA page_size").fetchone()[0]
    db_bytes = os.path.getsize(path)
    return {"shadow": shadow, "callbacks_counted": counted, "page_size": page_size,
            "bytes_per_callback": round(written / counted), "runs": runs,
            "instances": instances, "db_bytes": db_bytes,
            "db_bytes_per_run": round(db_bytes / runs) if runs else None}


def steady(base: str, baseline: str | None, crons: int, warm_minutes: int,
           minutes: int) -> dict:
    """steady_one with Shadow on and off, for this tree and (in children) the baseline's."""
    import subprocess
    trees = {"this": None} if baseline is None else {"baseline": baseline, "this": None}
    out = {}
    for name, tree in trees.items():
        for shadow in (True, False):
            env = dict(os.environ)
            if tree is not None:
                # a directory holding only a `qlshadow` link to the tree's app/ package
                pkg = os.path.join(base, f"pkg-{name}")
                os.makedirs(pkg, exist_ok=True)
                if not os.path.exists(os.path.join(pkg, "qlshadow")):
                    os.symlink(os.path.join(os.path.abspath(tree), "app"),
                               os.path.join(pkg, "qlshadow"))
                env["PYTHONPATH"] = pkg
                env["BENCH_TREE"] = tree
            child = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--steady-one",
                 "on" if shadow else "off", "--steady-crons", str(crons),
                 "--warm-minutes", str(warm_minutes), "--steady-minutes", str(minutes),
                 "--workdir", base], env=env, capture_output=True, text=True, check=True)
            result = json.loads(child.stdout.strip().splitlines()[-1])
            bench.progress(f"steady {name}: {result}")
            out[f"{name}-{'on' if shadow else 'off'}"] = result
    return out


# --- latency: 10,000 vs 1,000,000 Runs -------------------------------------------------------

def fill_runs(path: str, count: int, crons: int) -> None:
    """Bulk-insert count exited Runs spread over crons (raw sqlite3, one transaction)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    for n in range(crons):
        conn.execute("INSERT INTO crons (name, command, schedule, allow_multiple_instances, "
                     "status, is_disabled, created_at, updated_at) "
                     "VALUES (?, 'task', '* * * * *', 0, 1, 0, 1, 1)", (f"job{n}",))
    from qlshadow.storage import schema
    from qlshadow.core.shadow.ids import run_id

    def rows():  # as the writer stores them (schema.MOVED columns)
        for n in range(count):
            seconds = START + 60 * (n // crons)
            key = f"legacy-system:{seconds}:{n & 0xffffffff:08x}-9d4a-4e6b-8f1a-{n:012x}"
            yield schema._slim((seconds, run_id(key, seconds), key, n % crons + 1, "ab" * 32,
                                "scheduled_system", "exited", 1000, f"job/{n}.log", seconds,
                                seconds + 30, 0, f"accepted@{seconds} spawned@{seconds} "
                                f"running@{seconds} exited@{seconds + 30}"))
    columns = ", ".join(f'"{c}"' for c in schema.MOVED)
    conn.executemany(f'INSERT INTO shadow_runs ({columns}) VALUES '
                     f'({", ".join("?" * len(schema.MOVED))})', rows())
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def latency(base: str, counts: list, crons: int, requests: int) -> dict:
    from qlshadow import config
    from qlshadow.storage import db
    from qlshadow.core.auth import system_token

    clients = {}
    for count in counts:
        data = os.path.join(base, f"runs_{count}")
        app, settings = load_app(data, RETENTION_OFF)
        bench.progress(f"latency: inserting {count} Runs")
        fill_runs(config.sqlite_file(settings.db_url), count, crons)
        with db.database.connection_context(), db.write_transaction():
            token = system_token(settings.token_file)["value"]
        db.discard_connection()
        clients[count] = (app, {"Authorization": f"Bearer {token}"}, db.database.obj)
    cron = crons // 2
    paths = {"cron_id": f"/open/runs?cron_id={cron}&limit=50", "all": "/open/runs?limit=50"}
    results = {}
    timings = {}
    for count in counts:  # one warm-up pass each, and a run id to look up
        app, headers, database = clients[count]
        db.bind(database)
        listed = app.test_client().get(paths["cron_id"], headers=headers).get_json()["data"]
        assert len(listed) == 50, f"cron {cron} has only {len(listed)} Runs"
        paths_for = dict(paths, by_id=f"/open/runs/{listed[-1]['id']}")
        clients[count] = (app, headers, database, paths_for)
        db.discard_connection()
    timings = {(count, name): [] for count in counts for name in ("cron_id", "all", "by_id")}
    # Side by side: the databases take turns request by request, each bound in its turn.
    for _ in range(requests):
        for count in counts:
            app, headers, database, paths_for = clients[count]
            db.bind(database)
            client = app.test_client()
            for name, path in paths_for.items():
                began = time.perf_counter()
                response = client.get(path, headers=headers)
                timings[(count, name)].append(time.perf_counter() - began)
                assert response.status_code == 200
            db.discard_connection()
    for (count, name), values in timings.items():
        results.setdefault(str(count), {})[name + "_median_ms"] = round(statistics.median(values) * 1000, 3)
    small, large = (str(c) for c in counts)
    results["ratio_cron_id"] = round(
        results[large]["cron_id_median_ms"] / results[small]["cron_id_median_ms"], 3)
    results["ratio_all"] = round(results[large]["all_median_ms"] / results[small]["all_median_ms"], 3)
    results["ratio_by_id"] = round(results[large]["by_id_median_ms"] / results[small]["by_id_median_ms"], 3)
    return results


# --- cost: retention on vs off, indexes vs none, over HTTP ----------------------------------

def cost(base: str, python: str, crons: int, callbacks: int, rounds: int, clients: int) -> dict:
    variants = {
        "retention_off": RETENTION_OFF,
        "retention_default": {},
        "retention_cap20": {"QL_RETENTION_ROWS_PER_CRON": "20"},
        "no_read_indexes": RETENTION_OFF,
    }
    servers = []
    try:
        for name, env in variants.items():
            path = os.path.join(base, name, "qlshadow.db")
            server = bench.make_product(name, python, base, f"sqlite:///{path}", True, 4,
                                        db_path=path)
            server.env.update(env)
            server.start()
            bench.create_crons(server, crons)
            if name == "no_read_indexes":
                conn = sqlite3.connect(path)
                for index in NEW_INDEXES:
                    conn.execute(f"DROP INDEX {index}")
                conn.close()
            servers.append(server)
        per_wave = len(bench.wave(list(range(1, crons + 1)), 1, 7, 0.1, 0.05, START))
        waves = max(rounds, -(-callbacks // per_wave))
        totals = {s.name: {"seconds": 0.0, "callbacks": 0, "errors": 0,
                           "write_start": bench.proc_write_bytes(s.pid)} for s in servers}
        for r in range(rounds):
            for server in servers if r % 2 == 0 else reversed(servers):
                for w in range(r * waves // rounds, (r + 1) * waves // rounds):
                    bodies = bench.wave(server.cron_ids, w + 1, 7, 0.1, 0.05, START)
                    result = bench.drive(server.port, bodies, clients, server.headers())
                    t = totals[server.name]
                    t["seconds"] += result["seconds"]
                    t["callbacks"] += len(bodies)
                    t["errors"] += len(result["errors"])
            bench.progress(f"cost: round {r + 1}/{rounds}")
        out = {}
        for server in servers:
            t = totals[server.name]
            written = bench.proc_write_bytes(server.pid) - t["write_start"]
            out[server.name] = {"callbacks": t["callbacks"], "errors": t["errors"],
                                "callbacks_per_s": round(t["callbacks"] / t["seconds"], 1),
                                "bytes_written_per_callback": round(written / t["callbacks"], 1),
                                "db_wal_bytes": server.storage_bytes()}
        off = out["retention_off"]["callbacks_per_s"]
        out["ratio_default_on_off"] = round(out["retention_default"]["callbacks_per_s"] / off, 3)
        out["ratio_cap20_on_off"] = round(out["retention_cap20"]["callbacks_per_s"] / off, 3)
        out["bytes_ratio_indexes_vs_none"] = round(
            out["retention_off"]["bytes_written_per_callback"]
            / out["no_read_indexes"]["bytes_written_per_callback"], 3)
        return out
    finally:
        for server in servers:
            server.stop()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=("flat", "latency", "cost", "steady"),
                        default=["flat", "latency", "cost", "steady"])
    parser.add_argument("--baseline", default=None,
                        help="steady: another tree of the code to measure side by side")
    parser.add_argument("--steady-crons", type=int, default=20)
    parser.add_argument("--warm-minutes", type=int, default=1100,
                        help="steady: minutes before counting (past the 1,000-row cap)")
    parser.add_argument("--steady-minutes", type=int, default=100)
    parser.add_argument("--steady-one", choices=("on", "off"), help=argparse.SUPPRESS)
    parser.add_argument("--page-size", type=int, default=0,
                        help="steady: another SQLite page size for this tree's new database")
    parser.add_argument("--checkpoint-pages", type=int, default=0,
                        help="steady: another wal_autocheckpoint for this tree")
    parser.add_argument("--callbacks", type=int, default=1_000_000, help="flat: callbacks")
    parser.add_argument("--crons", type=int, default=10, help="flat: crons, each every minute")
    parser.add_argument("--sample-every", type=int, default=50_000)
    parser.add_argument("--runs", type=int, nargs=2, default=[10_000, 1_000_000])
    parser.add_argument("--latency-crons", type=int, default=100)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--cost-callbacks", type=int, default=30_000)
    parser.add_argument("--cost-rounds", type=int, default=6)
    parser.add_argument("--python", default=bench.default_python())
    parser.add_argument("--json", default="bench-storage.json")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args(argv)
    base = tempfile.mkdtemp(prefix="qlshadow-storage-", dir=args.workdir)
    if args.steady_one:  # a child of steady: one configuration, one JSON line
        if os.environ.get("BENCH_TREE"):
            # The tree on PYTHONPATH, not the checkout an editable install of the product
            # maps `qlshadow` to (its finder is on sys.meta_path, ahead of PYTHONPATH).
            sys.meta_path[:] = [f for f in sys.meta_path
                                if not getattr(f, "__module__", "").startswith("__editable__")]
        print(json.dumps(steady_one(base, args.steady_one == "on", args.steady_crons,
                                    args.warm_minutes, args.steady_minutes, args.page_size,
                                    args.checkpoint_pages)))
        return 0
    results = {"sqlite": sqlite3.sqlite_version, "python": sys.version.split()[0]}
    if "cost" in args.only:
        results["cost"] = cost(base, args.python, 200, args.cost_callbacks, args.cost_rounds, 16)
    if "latency" in args.only:
        results["latency"] = latency(base, args.runs, args.latency_crons, args.requests)
    if "steady" in args.only:
        results["steady"] = steady(base, args.baseline, args.steady_crons, args.warm_minutes,
                                   args.steady_minutes)
    if "flat" in args.only:
        results["flat"] = flat(base, args.callbacks, args.crons, args.sample_every)
    with open(args.json, "w") as fh:
        json.dump(results, fh, indent=2)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
