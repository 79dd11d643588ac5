#!/usr/bin/env python3
"""Soak qlshadow: a steady crond-shaped load for a bounded time, watching for leaks.

Starts its own server (`python -m qlshadow.cli serve`, one process, loopback only, a fresh
SQLite database in a temp dir unless --db-url names another fresh database) with Shadow
on, then runs client threads that each play one cron: a running callback and an idle
callback with the same new execution_id, over and over.

Every --interval seconds it prints one line: callbacks so far, errors, the server's
resident memory (VmRSS), its open file descriptors (/proc/<pid>/fd) and the database's
size on disk (SQLite file + WAL + shared memory). At the end it prints a JSON summary
as the last line, and exits 0 only when every callback was answered 200, the server
stayed up, and (on SQLite) the database holds exactly one Run per execution.

The client uses only the standard library; the server runs under this Python, which
must be able to import the app (e.g. the repository's .venv).

    .venv/bin/python scripts/soak.py                 # 10 minutes
    .venv/bin/python scripts/soak.py --duration 5    # a short check
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from harness import ROOT, Serve, clean_env


# The per-cron Run cap the server runs with (its default): a fast soak passes it, and
# retention then deletes a cron's oldest Runs, a few batches behind.
ROWS_PER_CRON = 1000


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Soak a fresh qlshadow server on loopback and report RSS, open file "
                    "descriptors and database size over time.")
    parser.add_argument("--duration", type=float, default=600,
                        help="seconds of load (default 600 = 10 minutes)")
    parser.add_argument("--interval", type=float, default=None,
                        help="seconds between report lines (default: duration/20, 1..30)")
    parser.add_argument("--clients", type=int, default=4, help="client threads (default 4)")
    parser.add_argument("--threads", type=int, default=None,
                        help="server worker threads (default: the service's own, 1 on SQLite)")
    parser.add_argument("--pause", type=float, default=0.0,
                        help="seconds each client waits between executions (default 0: flat out)")
    parser.add_argument("--db-url", default=None,
                        help="a fresh, empty database URL (default: SQLite in a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (database, log)")
    args = parser.parse_args(argv)
    if (args.duration <= 0 or args.clients < 1 or (args.threads is not None and args.threads < 1)
            or args.pause < 0):
        parser.error("--duration, --clients and --threads must be positive, --pause not negative")
    if args.interval is None:
        args.interval = min(30.0, max(1.0, args.duration / 20))
    return args


class Server:
    """The server process, started with exactly the settings the soak needs."""

    def __init__(self, workdir: str, db_url: str | None, threads: int | None):
        self.workdir = workdir
        db_url = db_url or f"sqlite:///{os.path.join(workdir, 'qlshadow.db')}"
        # Size and Run count are read from the file on SQLite; PostgreSQL reports neither.
        from qlshadow.config import sqlite_file
        self.db_path = sqlite_file(db_url)
        env = clean_env({"QL_DATA_DIR": workdir, "QL_HOST": "127.0.0.1", "QL_PORT": "0",
                         "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": "",
                         "QL3_SHADOW_ORIGINS": "scheduled_system", "QL_DB_URL": db_url,
                         "QL_RETENTION_ROWS_PER_CRON": str(ROWS_PER_CRON)})
        if threads is not None:
            env["QL_THREADS"] = str(threads)
        subprocess.run([sys.executable, "-m", "qlshadow.cli", "token", "system"], env=env, cwd=ROOT,
                       check=True, capture_output=True, timeout=60)
        with open(os.path.join(workdir, "token.json"), encoding="utf-8") as fh:
            self.token = json.load(fh)["value"]
        self.log_path = os.path.join(workdir, "server.log")
        self.serve = Serve(env=env, log_path=self.log_path, grace=15).start()
        self.process, self.port = self.serve.process, self.serve.port

    def request(self, method: str, path: str, body=None, timeout: float = 30):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body).encode(),
                         headers={"Authorization": f"Bearer {self.token}",
                                  "Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def sample(self) -> dict:
        """RSS (kB), open fds and database bytes of the running server."""
        pid = self.process.pid
        rss = fds = None
        try:
            with open(f"/proc/{pid}/status", encoding="ascii") as fh:
                rss = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except (OSError, StopIteration):
            pass  # no /proc (not Linux) or the process is gone
        size = None
        if self.db_path:
            size = sum(os.path.getsize(self.db_path + suffix) for suffix in ("", "-wal", "-shm")
                       if os.path.exists(self.db_path + suffix))
        return {"rss_kb": rss, "fds": fds, "db_bytes": size}

    def stop(self) -> int | None:
        return self.serve.stop()


class Load:
    """Client threads, one cron each: running then idle with a fresh execution_id."""

    def __init__(self, server: Server, cron_ids: list, pause: float):
        self.server = server
        self.pause = pause
        self.cron_ids = cron_ids
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.callbacks = 0
        self.statuses: dict = {}
        self.executions = 0  # executions whose two callbacks were both answered 200
        self.per_cron = {c: 0 for c in cron_ids}  # the same, per cron
        self.threads = [threading.Thread(target=self._play, args=(c,), daemon=True)
                        for c in cron_ids]

    def _play(self, cron_id: int) -> None:
        pid = 10_000 * cron_id
        while not self.stop.is_set():
            pid += 1
            seconds = int(time.time())
            eid = f"legacy-system:{seconds}:{uuid.uuid4()}"
            base = {"ids": [str(cron_id)], "pid": pid, "log_path": f"soak/{cron_id}/{pid}.log",
                    "execution_id": eid}
            ok = True
            for body in ({**base, "status": 0, "last_execution_time": seconds},
                         {**base, "status": 1, "last_running_time": 1, "exit_code": 0}):
                try:
                    status = self.server.request("PUT", "/open/crons/status", body)[0]
                except (OSError, http.client.HTTPException) as exc:
                    status = type(exc).__name__
                with self.lock:
                    self.callbacks += 1
                    self.statuses[status] = self.statuses.get(status, 0) + 1
                ok = ok and status == 200
            if ok:
                with self.lock:
                    self.executions += 1
                    self.per_cron[cron_id] += 1
            if self.pause:
                self.stop.wait(self.pause)

    def errors(self) -> int:
        with self.lock:
            return sum(n for status, n in self.statuses.items() if status != 200)


def count_runs(db_path: str | None) -> dict | None:
    """cron id -> its Shadow Runs in the database (SQLite only)."""
    if not db_path:
        return None
    conn = sqlite3.connect(db_path, timeout=30)
    try:
        return dict(conn.execute("SELECT cron_id, count(*) FROM shadow_runs GROUP BY cron_id"))
    finally:
        conn.close()


def runs_match(runs: dict, executions: dict) -> bool:
    """Every answered execution has its one Run, except the oldest ones retention removed:
    per cron, no more Runs than executions and no fewer than the newest ROWS_PER_CRON."""
    return all(min(count, ROWS_PER_CRON) <= runs.get(cron, 0) <= count
               for cron, count in executions.items()) and set(runs) <= set(executions)


def summarize(samples: list, key: str) -> dict:
    values = [s[key] for s in samples if s[key] is not None]
    if not values:
        return {"first": None, "last": None, "max": None}
    return {"first": values[0], "last": values[-1], "max": max(values)}


def main(argv=None) -> int:
    args = parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="qlshadow-soak-")
    server = None
    try:
        server = Server(workdir, args.db_url, args.threads)
        cron_ids = []
        for n in range(args.clients):
            status, raw = server.request("POST", "/open/crons", {
                "name": f"soak{n}", "command": f"task soak{n}.sh", "schedule": "*/5 * * * *"})
            if status != 200:
                raise RuntimeError(f"creating a cron failed: {status} {raw[:200]!r}")
            cron_ids.append(json.loads(raw)["data"]["id"])
        load = Load(server, cron_ids, args.pause)
        samples = [{"t": 0.0, "callbacks": 0, "errors": 0, **server.sample()}]
        started = time.monotonic()
        for thread in load.threads:
            thread.start()
        alive = True
        while True:
            left = args.duration - (time.monotonic() - started)
            if left <= 0:
                break
            time.sleep(min(args.interval, left))
            elapsed = time.monotonic() - started
            sample = {"t": round(elapsed, 1), "callbacks": load.callbacks,
                      "errors": load.errors(), **server.sample()}
            samples.append(sample)
            print(f"t={sample['t']:.0f}s callbacks={sample['callbacks']} "
                  f"rate={sample['callbacks'] / max(elapsed, 1e-9):.0f}/s "
                  f"errors={sample['errors']} rss_kb={sample['rss_kb']} fds={sample['fds']} "
                  f"db_bytes={sample['db_bytes']}", flush=True)
            if server.process.poll() is not None:
                alive = False
                break
        load.stop.set()
        for thread in load.threads:
            thread.join(60)
        elapsed = time.monotonic() - started
        final = {"t": round(elapsed, 1), "callbacks": load.callbacks, "errors": load.errors(),
                 **server.sample()}
        samples.append(final)
        exit_code = server.stop()
        runs = count_runs(server.db_path)
        summary = {
            "duration_s": round(elapsed, 1), "clients": args.clients,
            "server_threads": args.threads or "service default", "callbacks": load.callbacks,
            "executions": load.executions, "errors": load.errors(),
            "statuses": {str(k): v for k, v in sorted(load.statuses.items(), key=str)},
            "rate_per_s": round(load.callbacks / max(elapsed, 1e-9), 1),
            "runs": None if runs is None else sum(runs.values()),
            "runs_match": None if runs is None else runs_match(runs, load.per_cron),
            "rows_per_cron": ROWS_PER_CRON,
            "rss_kb": summarize(samples, "rss_kb"), "fds": summarize(samples, "fds"),
            "db_bytes": summarize(samples, "db_bytes"), "samples": len(samples),
            "server_alive": alive, "server_exit": exit_code,
        }
        print(json.dumps(summary, sort_keys=True), flush=True)
        good = alive and summary["errors"] == 0 and summary["runs_match"] is not False
        return 0 if good else 1
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        print(f"soak: {exc}", file=sys.stderr)
        return 1
    finally:
        if server is not None and server.process.poll() is None:
            server.stop()
        if args.keep:
            print(f"soak: kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
