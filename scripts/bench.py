#!/usr/bin/env python3
"""Benchmark qlshadow against the floor of its own stack, side by side in one run.

Starts its own servers (each in its own process, on a free loopback port, with a fresh
database in a temp dir) and drives them with the same crond-shaped load:

  floor       a minimal Flask + waitress app (same imports and route, waitress's default
              4 threads) that answers {"code":200} without a database
  sqlite_off  the product on SQLite, Shadow off
  sqlite_on   the product on SQLite, Shadow on (QL3_SHADOW_ORIGINS=scheduled_system)
  pg_off/pg_on the same on PostgreSQL, when --pg-url is reachable

Load: a crond burst (N crons firing at once, each sending running then idle with an
execution_id; 10 % duplicated and 5 % reordered callbacks) over 16 keep-alive clients,
then a sustained run of the same waves (>= 50,000 callbacks by default), interleaved
between the servers in rounds so that a noisy neighbour hits all of them alike.

Also measured in the same run: a write floor (one SQLite transaction updating one row,
same pragmas) and each server's time from process start to its first /health 200.

Prints a table and the budgets on stdout, progress on stderr, and writes a JSON file.
The client side uses only the standard library; the servers run under --python (a
Python with flask, waitress and peewee; by default this one if it has them, else the
repository's .venv).
"""
from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from importlib.util import find_spec
from urllib.parse import urlsplit, urlunsplit

from harness import FLOOR_STARTUP, STARTUP, Serve

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 1024 * 1024
CHILDREN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_children")


def child(name: str) -> str:
    """The path of one of the programs the bench runs in child processes (bench_children/)."""
    return os.path.join(CHILDREN, name + ".py")


# waitress's own default, and the floor's best: its 1-thread figure is far lower (its main
# loop polls a busy channel while the one worker finishes a Flask response).
FLOOR_THREADS = 4

# --variants, for the table of designs in docs/PERFORMANCE.md (bench_children/serve_variant.py):
# (name, serving.serve options or "counters": "nometrics" for Settings.count_metrics=False,
# QL_THREADS or None for the product's default). Shadow on, SQLite.
VARIANTS = (
    # waitress's documented API only: callbacks on 4 worker threads, one at a time / all at once
    ("on_workers_lock", {"callback_lane": "lock"}, 4),
    ("on_workers_free", {"callback_lane": "off"}, 4),
    ("on_loop_5ms", {"switch_interval": 0.005}, None),  # Python's default switch interval
    ("on_nometrics", {"counters": "nometrics"}, None),  # the shipped design, counters off
)
# --design-space: more points around the shipped design (Shadow on, SQLite), each changing
# one thing: (name, QL_THREADS, serving.serve options, BENCH_* knobs and environment).
DESIGN_SPACE = (
    # Each callback's commit fsyncs the WAL (shipped before the group commit).
    ("ds_commit_each", None, {"group_commit": False}, {}),
    ("ds_1t", 1, {}, {}),
    ("ds_4t", 4, {}, {}),
    ("ds_lock_1t", 1, {"callback_lane": "lock"}, {}),
    ("ds_lock_2t", 2, {"callback_lane": "lock"}, {}),
    ("ds_switch_2ms", None, {"switch_interval": 0.002}, {}),
    ("ds_checkpoint_1000", None, {}, {"BENCH_WAL_AUTOCHECKPOINT": "1000"}),
    ("ds_no_retention", None, {}, {"BENCH_NO_RETENTION": "1"}),
    ("ds_cache_512", None, {}, {"BENCH_CACHE_SIZE": "-512"}),
    # Smaller pages, the WAL bound kept at 1 MiB (its checkpoint interval is in pages).
    ("ds_page_1024", None, {}, {"BENCH_PAGE_SIZE": "1024", "BENCH_WAL_AUTOCHECKPOINT": "1024"}),
    ("ds_page_2048", None, {}, {"BENCH_PAGE_SIZE": "2048", "BENCH_WAL_AUTOCHECKPOINT": "512"}),
    # The WAL truncated back to exactly 1 MiB (shipped before): cut and regrown every cycle.
    ("ds_truncate_1mib", None, {}, {"BENCH_JOURNAL_SIZE_LIMIT": "1048576"}),
    # synchronous=normal (QL_SQLITE_SYNCHRONOUS=normal, the default before power-cut tests):
    # fsyncs only at checkpoints, so answered callbacks since the last one die in a power cut.
    ("ds_synchronous_normal", None, {}, {"QL_SQLITE_SYNCHRONOUS": "normal"}),
    ("ds_off_synchronous_normal", None, {}, {"QL_SQLITE_SYNCHRONOUS": "normal",
                                             "QL3_SHADOW_ORIGINS": ""}),
    # A bound, not a design: no fsync at all (unsafe on power loss, never shipped); with
    # Shadow off too, for what the checkpoints' fsyncs cost each side of Shadow on / off.
    ("ds_synchronous_off", None, {}, {"BENCH_SYNCHRONOUS": "off"}),
    ("ds_off_synchronous_off", None, {}, {"BENCH_SYNCHRONOUS": "off", "QL3_SHADOW_ORIGINS": ""}),
    # A database at its steady size, as on a router after its first weeks: 20 Runs and
    # instances per cron are kept (4,000 with 200 crons), so retention frees as many pages
    # as callbacks fill and the file stops growing; with Shadow off too, for on / off there.
    ("ds_steady", None, {}, {"QL_RETENTION_ROWS_PER_CRON": "20"}),
    ("ds_off_steady", None, {}, {"QL_RETENTION_ROWS_PER_CRON": "20", "QL3_SHADOW_ORIGINS": ""}),
)

# PostgreSQL administration through the servers' driver (the client stays stdlib-only).

_T0 = time.monotonic()


def progress(message: str) -> None:
    """One progress line on stderr."""
    print(f"[bench {time.monotonic() - _T0:6.1f}s] {message}", file=sys.stderr, flush=True)


# --- /proc ---------------------------------------------------------------------------------

def proc_status(pid: int) -> dict:
    """VmRSS and VmHWM of a process, in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_write_bytes(pid: int) -> int:
    """Bytes this process caused to be sent to storage (/proc/<pid>/io write_bytes)."""
    with open(f"/proc/{pid}/io") as fh:
        for line in fh:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    raise RuntimeError(f"no write_bytes in /proc/{pid}/io")


# --- PostgreSQL ----------------------------------------------------------------------------

def pg_url_for(base: str, name: str) -> str:
    parts = urlsplit(base)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, ""))


def pg_query(python: str, url: str, sql: str) -> str:
    result = subprocess.run([python, child("pg_query"), url, sql], capture_output=True,
                            text=True, timeout=60)
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit {result.returncode}")
    return result.stdout.strip()


# --- servers -------------------------------------------------------------------------------

class Server:
    """One server process under test, started by the bench and stopped by its PID."""

    def __init__(self, name: str, argv: list, env: dict, workdir: str, db_path: str | None,
                 pg: tuple | None = None):
        self.name, self.argv, self.env, self.workdir = name, argv, env, workdir
        self.db_path = db_path  # SQLite file (its -wal beside it), or None
        self.pg = pg  # (python, url) for PostgreSQL size queries, or None
        self.process = None
        self.port = None
        self.token = ""
        self.cron_ids: list = []
        self.figures: dict = {}
        self.serve: Serve | None = None
        self.line = STARTUP  # the floor's is FLOOR_STARTUP

    @property
    def pid(self) -> int:
        return self.process.pid

    def start(self) -> float:
        """Start the process; returns seconds from spawn to the first /health 200."""
        began = time.monotonic()
        self.serve = Serve(self.argv, env=self.env, log_path=os.path.join(self.workdir, f"{self.name}.log"),
                           timeout=60, line=self.line)
        try:
            self.serve.start()
        except RuntimeError as exc:
            raise RuntimeError(f"{self.name} did not start: {exc}") from None
        self.process, self.port = self.serve.process, self.serve.port
        deadline = began + 60
        while True:
            try:
                status, _ = request(self.port, "GET", "/health", timeout=5)
                if status == 200:
                    return time.monotonic() - began
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} never answered /health 200")
            time.sleep(0.002)

    def stop(self) -> None:
        if self.serve is not None:
            self.serve.stop()

    def storage_bytes(self):
        """Database (+ WAL) size in bytes, or None for the floor."""
        if self.db_path:
            return sum(os.path.getsize(p) for p in (self.db_path, self.db_path + "-wal")
                       if os.path.exists(p))
        if self.pg:
            return int(pg_query(self.pg[0], self.pg[1], "SELECT pg_database_size(current_database())"))
        return None

    def headers(self) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers


def request(port: int, method: str, path: str, body=None, headers=None, timeout=30):
    """One request on a fresh connection; returns (status, raw body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def product_env(workdir: str, db_url: str, shadow: bool, threads: int | None) -> dict:
    """The product's environment; threads=None keeps its own default QL_THREADS."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
    env.update({"QL_DATA_DIR": workdir, "QL_DB_URL": db_url, "QL_HOST": "127.0.0.1",
                "QL_PORT": "0", "QL_SCHEDULER": "node",
                "QL_CRONTAB_INSTALL": "", "QL3_SHADOW_ORIGINS": "scheduled_system" if shadow else ""})
    if threads is not None:
        env["QL_THREADS"] = str(threads)
    return env


def make_product(name: str, python: str, base: str, db_url: str, shadow: bool,
                 threads: int | None, db_path=None, pg=None, extra_env=None) -> Server:
    """A product server whose data dir holds a fresh database and a system token."""
    workdir = os.path.join(base, name)
    os.makedirs(workdir)
    env = product_env(workdir, db_url, shadow, threads)
    env.update(extra_env or {})
    # The token the shell scripts would use, made the way they make it.
    result = subprocess.run([python, "-m", "qlshadow.cli", "token", "system"], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"{name}: qlshadow token system failed: {result.stderr.strip()}")
    server = Server(name, [python, "-m", "qlshadow.cli", "serve"], env, workdir, db_path, pg)
    with open(os.path.join(workdir, "token.json")) as fh:
        server.token = json.load(fh)["value"]
    return server


def make_floor(python: str, base: str, threads: int | None, write: bool = False) -> Server:
    """The floor app; with write=True the write reference (one-row transaction per callback)."""
    name = "floor_write" if write else "floor"
    workdir = os.path.join(base, name)
    os.makedirs(workdir)
    path = child("floor_app")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_", "FLOOR_"))}
    env.update({"QL_PORT": "0", "QL_THREADS": str(threads or FLOOR_THREADS)})
    if write:
        env["FLOOR_WRITE_DB"] = os.path.join(workdir, "floor.db")
    server = Server(name, [python, path], env, workdir, None)
    server.line = FLOOR_STARTUP
    return server


def create_crons(server: Server, count: int) -> None:
    """Create the bench's crons through the API (the floor needs none)."""
    if server.name.startswith("floor"):
        server.cron_ids = list(range(1, count + 1))
        return
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    ids = []
    for n in range(count):
        body = json.dumps({"name": f"bench {n}", "command": f"task bench_{n}.sh",
                           "schedule": f"{n % 60} * * * *"}).encode()
        conn.request("POST", "/open/crons", body=body, headers=server.headers())
        response = conn.getresponse()
        raw = response.read()
        if response.status != 200:
            raise RuntimeError(f"{server.name}: creating a cron failed: {response.status} {raw[:200]!r}")
        ids.append(json.loads(raw)["data"]["id"])
    conn.close()
    server.cron_ids = ids


# --- load ----------------------------------------------------------------------------------

def wave(cron_ids: list, number: int, seed: int, dup: float, reorder: float, base_time: int) -> list:
    """One crond minute: every cron starts, then finishes; some callbacks doubled or swapped.

    Deterministic in (seed, number), so every server gets the same callbacks.
    """
    rng = random.Random(seed * 1_000_003 + number)
    begin = base_time + number * 60
    runnings, idles = [], []
    for index, cron_id in enumerate(cron_ids):
        execution_id = f"legacy-system:{begin}:{uuid.UUID(int=rng.getrandbits(128), version=4)}"
        pid = rng.randint(100, 4_000_000)
        log_path = f"/ql/data/log/bench_{index}/{begin}-{pid}.log"
        common = {"ids": [str(cron_id)], "pid": str(pid), "log_path": log_path,
                  "execution_id": execution_id}
        runnings.append(json.dumps({**common, "status": 0, "last_execution_time": begin}).encode())
        idles.append(json.dumps({**common, "status": 1, "last_running_time": rng.randint(1, 90),
                                 "exit_code": 0 if rng.random() < 0.9 else 1}).encode())
    order = list(range(len(cron_ids)))
    rng.shuffle(order)
    sequence = [runnings[i] for i in order]
    rng.shuffle(order)
    finishing = [idles[i] for i in order]
    # Reordered: the finish arrives before the start of the same execution.
    for i in rng.sample(range(len(cron_ids)), int(round(len(cron_ids) * reorder))):
        finishing.remove(idles[i])
        sequence.insert(sequence.index(runnings[i]), idles[i])
    sequence += finishing
    # Duplicated: a callback resent (its response was lost) a little later.
    for i in sorted(rng.sample(range(len(sequence)), int(round(len(sequence) * dup))), reverse=True):
        sequence.insert(rng.randint(i + 1, min(len(sequence), i + 1 + len(cron_ids))), sequence[i])
    return sequence


def drive(port: int, bodies: list, clients: int, headers: dict) -> dict:
    """Send bodies over `clients` keep-alive connections; returns timings and errors."""
    counter = itertools.count()
    latencies: list = []
    errors: list = []
    barrier = threading.Barrier(clients + 1)

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.connect()
        mine = []
        barrier.wait()
        total = len(bodies)
        perf = time.perf_counter
        while True:
            i = next(counter)
            if i >= total:
                break
            t = perf()
            try:
                conn.request("PUT", "/open/crons/status", body=bodies[i], headers=headers)
                response = conn.getresponse()
                raw = response.read()
                if response.status != 200:
                    errors.append(f"{response.status} {raw[:120]!r}")
            except (OSError, http.client.HTTPException) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            mine.append(perf() - t)
        conn.close()
        latencies.extend(mine)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    return {"seconds": time.perf_counter() - began, "latencies": latencies, "errors": errors}


# wrk drives the sustained run when it is installed: a C client leaves both cores to the
# servers, where 16 Python client threads would take most of one and cap the floor itself.
# Each wrk thread sends every Nth body of the list in order, so starts still precede their
# finishes; the run lasts a fixed time and the bodies it reached are the callbacks counted.
WRK_SCRIPT = r"""
local counter, threads = 0, {}
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end
function init(args)
  local path, nthreads, token = args[1], tonumber(args[2]), args[3]
  bodies, i, n, errors = {}, 0, 0, 0
  for line in io.lines(path) do
    if i % nthreads == id then table.insert(bodies, line) end
    i = i + 1
  end
  headers = {["Content-Type"] = "application/json"}
  if token ~= "" then headers["Authorization"] = "Bearer " .. token end
end
function request()
  n = n + 1
  if n > #bodies then n = 1 end
  return wrk.format("PUT", "/open/crons/status", headers, bodies[n])
end
function response(status, hdrs, body)
  if status ~= 200 then errors = errors + 1 end
end
function done(summary, latency, requests)
  local errs = 0
  for _, t in ipairs(threads) do errs = errs + t:get("errors") end
  io.write(string.format("WRK %d %d %d %d %d %d %d\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(95), latency:percentile(99), errs,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
"""


def drive_wrk(port: int, bodies: list, clients: int, token: str, seconds: float,
              workdir: str) -> dict:
    """Run wrk for `seconds` over `bodies` (more than it can send); returns its figures."""
    path = os.path.join(workdir, "wrk-bodies.txt")
    with open(path, "wb") as fh:
        fh.write(b"\n".join(bodies) + b"\n")
    script = os.path.join(workdir, "wrk-callbacks.lua")
    with open(script, "w") as fh:
        fh.write(WRK_SCRIPT)
    wrk_threads = 2
    result = subprocess.run(
        ["wrk", "-t", str(wrk_threads), "-c", str(clients), "-d", f"{max(1, round(seconds))}s",
         "--timeout", "30s", "-s", script, f"http://127.0.0.1:{port}", "--", path, str(wrk_threads),
         token],
        capture_output=True, text=True, timeout=seconds + 120)
    line = next((row for row in result.stdout.splitlines() if row.startswith("WRK ")), None)
    if result.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed: {result.stderr.strip() or result.stdout.strip()}")
    requests, duration, p50, p95, p99, bad_status, socket_errors = map(int, line.split()[1:])
    if requests >= len(bodies):
        raise RuntimeError("wrk sent every body of the round; raise --max-rate")
    return {"callbacks": requests, "seconds": duration / 1e6, "p50_ms": p50 / 1000,
            "p95_ms": p95 / 1000, "p99_ms": p99 / 1000, "errors": bad_status + socket_errors}


def percentile(sorted_values: list, fraction: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, int(round(fraction * len(sorted_values) + 0.5)) - 1))
    return sorted_values[index]


def summarize(callbacks: int, seconds: float, latencies: list, errors: list) -> dict:
    ordered = sorted(latencies)
    return {
        "callbacks": callbacks,
        "seconds": round(seconds, 4),
        "callbacks_per_s": round(callbacks / seconds, 1) if seconds > 0 else 0.0,
        "p50_ms": round(percentile(ordered, 0.50) * 1000, 3),
        "p95_ms": round(percentile(ordered, 0.95) * 1000, 3),
        "p99_ms": round(percentile(ordered, 0.99) * 1000, 3),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


# --- slow work beside callbacks --------------------------------------------------------------

# Fills a product database before its server starts: `crons` crons firing every minute,
# `runs` exited Shadow Runs over the last days (one a minute per cron, newest first) and
# `old` more, 40 days older, for `qlshadow prune` to delete. Plain executemany in batches
# of 50,000 under the product's own models, ids and schema.


def seed_database(python: str, env: dict, crons: int, runs: int, old: int) -> list:
    """Fill a product database (bench_children/seed.py); returns the ids of the crons it made."""
    result = subprocess.run([python, child("seed"), str(crons), str(runs), str(old)],
                            env=env, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(f"seeding failed: {result.stderr.strip()[-2000:]}")
    return [int(x) for x in result.stdout.split()]


def slow_env(install_seconds: float) -> dict:
    """What a server needs for the slow work: crontab installs that take install_seconds."""
    # The install command reads no crontab: QL_CRONTAB_LIST empty (the block is all it has).
    return {"QL_SCHEDULER": "system", "QL_CRONTAB_INSTALL": f"sleep {install_seconds:g}",
            "QL_CRONTAB_LIST": "",
            # Nothing in the window is pruned: the gate keeps its Runs; the old ones go (by
            # the day limit; no byte budget, which would have prune empty the window).
            "QL_RETENTION_ROWS_PER_CRON": "0", "QL_STORAGE_BUDGET": "0"}


def slow_work(port: int, token: str, cron_ids: list, seconds: float, python: str, env: dict,
              rate: float = 40.0, clients: int = 2,
              kinds: tuple = ("installs", "gates", "pages", "prunes")) -> dict:
    """Callbacks at `rate` per second from `clients` connections while, each in its own
    loop for `seconds`: cron changes (each installs the crontab), the 7-day gate, status
    pages, and `qlshadow prune` in its own process (those named in kinds). Every loop is
    bounded by the deadline (a request in flight then still finishes).

    Returns the callbacks' latencies (p50/p99/max), how many of each slow thing ran, and for
    each kind how many callbacks were sent after one had started and answered before it
    ended ("answered_inside").
    """
    deadline = time.monotonic() + seconds
    auth = {"Authorization": f"Bearer {token}"}
    slow_spans: list = []  # (kind, began, ended)
    callbacks: list = []  # (sent, answered)
    errors: list = []
    counts = {"installs": 0, "gates": 0, "pages": 0, "prunes": 0}

    def call(method, path, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.getheader("Set-Cookie") or "", response.read()
        finally:
            conn.close()

    def loop(kind, action):
        n = 0
        while time.monotonic() < deadline:
            began = time.monotonic()
            try:
                ok = action(n)
            except Exception as exc:  # counted as an error: a loop never dies silently
                ok = f"{type(exc).__name__}: {exc}"
            if ok is not True:
                errors.append(f"{kind}: {ok}")
            slow_spans.append((kind, began, time.monotonic()))
            counts[kind] += 1
            n += 1

    def install(n):
        body = json.dumps({"name": f"slow change {n}", "command": f"task change_{n}.sh",
                           "schedule": "5 4 * * *"}).encode()
        status, _, raw = call("POST", "/open/crons", body,
                              {**auth, "Content-Type": "application/json"})
        return True if status == 200 else f"{status} {raw[:100]!r}"

    def gate(n):
        status, _, raw = call("GET", "/open/reconcile", headers=auth)
        return True if status == 200 else f"{status} {raw[:100]!r}"

    cookie = []

    def page(n):
        if not cookie:
            status, set_cookie, _ = call("POST", "/page/login", f"token={token}".encode(),
                                         {"Content-Type": "application/x-www-form-urlencoded"})
            if status != 303:
                return f"sign-in {status}"
            cookie.append(set_cookie.split(";", 1)[0])
        status, _, raw = call("GET", ("/page/", "/page/gate")[n % 2],
                              headers={"Cookie": cookie[0]})
        return True if status == 200 else f"{status} {raw[:100]!r}"

    def prune(n):
        result = subprocess.run([python, "-m", "qlshadow.cli", "prune"], env=env, cwd=ROOT,
                                capture_output=True, text=True, timeout=600)
        return True if result.returncode == 0 else result.stderr.strip()[-200:]

    def sender(offset):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {**auth, "Content-Type": "application/json"}
        interval = clients / rate
        mine = [cron_ids[i] for i in range(offset, len(cron_ids), clients)]
        n = 0
        next_at = time.monotonic()
        while time.monotonic() < deadline:
            cron_id = mine[(n // 2) % len(mine)]
            begin = 1_764_460_800 + (n // 2) * 60
            common = {"ids": [str(cron_id)], "pid": str(100 + n), "log_path": f"s/{n}.log",
                      "execution_id": f"legacy-system:{begin}:slow-{offset}-{n // 2}"}
            body = (dict(common, status=0, last_execution_time=begin) if n % 2 == 0 else
                    dict(common, status=1, last_running_time=1, exit_code=0))
            sent = time.monotonic()
            try:
                conn.request("PUT", "/open/crons/status", body=json.dumps(body).encode(),
                             headers=headers)
                response = conn.getresponse()
                raw = response.read()
                if response.status != 200:
                    errors.append(f"callback: {response.status} {raw[:100]!r}")
            except (OSError, http.client.HTTPException) as exc:
                errors.append(f"callback: {type(exc).__name__}: {exc}")
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            callbacks.append((sent, time.monotonic()))
            n += 1
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
        conn.close()

    workers = [threading.Thread(target=loop, args=(kind, action), daemon=True)
               for kind, action in (("installs", install), ("gates", gate), ("pages", page),
                                    ("prunes", prune)) if kind in kinds]
    workers += [threading.Thread(target=sender, args=(k,), daemon=True) for k in range(clients)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    latencies = sorted(answered - sent for sent, answered in callbacks)
    # Callbacks sent after a slow request and answered before it: they did not wait for it.
    inside = {kind: 0 for kind in counts}
    for kind, began, ended in slow_spans:
        inside[kind] += sum(1 for sent, answered in callbacks if began < sent and answered < ended)
    durations = {kind: round(statistics.median(e - b for k, b, e in slow_spans if k == kind), 3)
                 for kind in counts if counts[kind]}
    return {"callbacks": len(latencies),
            "p50_ms": round(percentile(latencies, 0.50) * 1000, 3),
            "p99_ms": round(percentile(latencies, 0.99) * 1000, 3),
            "max_ms": round((latencies[-1] if latencies else 0.0) * 1000, 3),
            "over_1s": sum(1 for x in latencies if x > 1.0),
            **counts, "median_seconds": durations,
            "answered_inside": inside,
            "errors": len(errors), "first_error": errors[0] if errors else None}


# --- the run -------------------------------------------------------------------------------

def baseline_env(ref: str, base: str) -> dict:
    """PYTHONPATH that imports qlshadow as of git commit ref (its app/, unpacked under base)."""
    source = os.path.join(base, "baseline-source")
    package = os.path.join(base, "baseline-path")
    os.makedirs(source)
    os.makedirs(package)
    archive = subprocess.run(["git", "-C", ROOT, "archive", ref, "app", "shell"],
                             capture_output=True, timeout=60)
    if archive.returncode != 0:
        raise RuntimeError(f"--baseline {ref}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", source], input=archive.stdout, check=True, timeout=60)
    os.symlink(os.path.join(source, "app"), os.path.join(package, "qlshadow"))
    os.symlink(os.path.join(source, "shell"), os.path.join(package, "shell"))  # task.sh
    return {"PYTHONPATH": package}


def machine(python: str, workdir: str, pg_version) -> dict:
    def read(path):
        try:
            with open(path) as fh:
                return fh.read()
        except OSError:
            return ""
    cpu = next((line.split(":", 1)[1].strip() for line in read("/proc/cpuinfo").splitlines()
                if line.startswith("model name")), platform.processor() or "unknown")
    mem = next((int(line.split()[1]) for line in read("/proc/meminfo").splitlines()
                if line.startswith("MemTotal:")), 0)
    versions = subprocess.run(
        [python, child("versions")],
        capture_output=True, text=True, timeout=60).stdout.split("\n")
    fs = subprocess.run(["df", "-T", workdir], capture_output=True, text=True).stdout.splitlines()
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "mem_total_mib": mem // 1024,
        "filesystem": " ".join(fs[-1].split()[:2]) if len(fs) > 1 else "unknown",
        "kernel": platform.release(),
        "python": versions[0] if versions else "",
        "sqlite": versions[1] if len(versions) > 1 else "",
        "packages": versions[2] if len(versions) > 2 else "",
        "postgresql": pg_version,
    }


def write_floor(python: str, base: str, count: int, rows: int, level: str) -> dict:
    path = os.path.join(base, f"write-floor-{level}.db")
    result = subprocess.run([python, child("write_floor"), path, str(count), str(rows), level],
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"write floor failed: {result.stderr.strip()}")
    written = int(result.stdout.strip())
    return {"transactions": count, "write_bytes": written, "synchronous": level,
            "bytes_per_transaction": round(written / count, 1)}


def row_counts(server: Server):
    """Rows the run left behind (a sanity check that Shadow really wrote), or None."""
    queries = {"runs": "SELECT count(*) FROM shadow_runs",
               "exited_runs": "SELECT count(*) FROM shadow_runs WHERE finished_at IS NOT NULL",
               "accept_failures": "SELECT count(*) FROM shadow_failures",
               "instances": "SELECT count(*) FROM running_instances"}
    if server.db_path:
        conn = sqlite3.connect(f"file:{server.db_path}?mode=ro", uri=True)
        try:
            return {k: conn.execute(q).fetchone()[0] for k, q in queries.items()}
        finally:
            conn.close()
    if server.pg:
        return {k: int(pg_query(server.pg[0], server.pg[1], q)) for k, q in queries.items()}
    return None


def run(args) -> dict:
    python = args.python
    base = tempfile.mkdtemp(prefix="qlshadow-bench-", dir=args.workdir)
    servers: list = []
    slow_figures: dict = {}
    pg_databases: list = []
    skipped = {}
    try:
        pg_version = None
        if args.pg_url:
            try:
                pg_version = pg_query(python, pg_url_for(args.pg_url, "postgres"), "SHOW server_version")
            except Exception as exc:  # unreachable or no driver: the PostgreSQL rows are skipped
                skipped["postgresql"] = str(exc)
                progress(f"PostgreSQL skipped: {exc}")
        else:
            skipped["postgresql"] = "--pg-url is empty"

        # The floor at the level the product runs with here (QL_SQLITE_SYNCHRONOUS, default
        # full), and at normal for the designs that run with normal.
        level = os.environ.get("QL_SQLITE_SYNCHRONOUS", "full").strip() or "full"
        floor_writes = {}
        for each in dict.fromkeys((level, "normal")):
            progress(f"write floor: {args.write_floor} one-row transactions, synchronous={each}")
            floor_writes[each] = write_floor(python, base, args.write_floor, args.crons, each)
            progress(f"write floor: {floor_writes[each]['bytes_per_transaction']} bytes per transaction")
        floor_normal = floor_writes["normal"]
        floor_writes = floor_writes[level]

        servers.append(make_floor(python, base, args.threads))
        servers.append(make_floor(python, base, args.threads, write=True))
        for shadow in (False, True):
            name = f"sqlite_{'on' if shadow else 'off'}"
            path = os.path.join(base, name, "qlshadow.db")
            servers.append(make_product(name, python, base, f"sqlite:///{path}", shadow,
                                        args.threads, db_path=path))
        if args.baseline:
            path = os.path.join(base, "baseline", "qlshadow.db")
            servers.append(make_product("baseline", python, base, f"sqlite:///{path}", True,
                                        args.threads, db_path=path,
                                        extra_env=baseline_env(args.baseline, base)))
        if args.variants:
            for name, options, threads in VARIANTS:
                path = os.path.join(base, name, "qlshadow.db")
                server = make_product(name, python, base, f"sqlite:///{path}", True,
                                      threads, db_path=path)
                server.argv = [python, child("serve_variant"), json.dumps(options)]
                servers.append(server)
        if args.design_space or args.design:
            for name, threads, options, knobs in DESIGN_SPACE:
                if args.design and name not in args.design:
                    continue
                path = os.path.join(base, name, "qlshadow.db")
                server = make_product(name, python, base, f"sqlite:///{path}", True,
                                      threads, db_path=path)
                server.env.update(knobs)
                server.argv = [python, child("serve_variant"), json.dumps(options)]
                servers.append(server)
        if pg_version:
            for shadow in (False, True):
                name = f"pg_{'on' if shadow else 'off'}"
                db_name = f"qlshadow_bench_{uuid.uuid4().hex[:12]}"
                pg_query(python, pg_url_for(args.pg_url, "postgres"), f'CREATE DATABASE "{db_name}"')
                pg_databases.append(db_name)
                url = pg_url_for(args.pg_url, db_name)
                servers.append(make_product(name, python, base, url, shadow, args.threads,
                                            pg=(python, url)))

        # Start-up: each server started args.starts times, round-robin; the last start stays.
        starts = {s.name: [] for s in servers}
        for k in range(args.starts):
            for server in servers:
                starts[server.name].append(server.start())
                if k < args.starts - 1:
                    server.stop()
        for server in servers:
            server.figures["startup_s"] = round(statistics.median(starts[server.name]), 4)
            server.figures["startup_all_s"] = [round(x, 4) for x in starts[server.name]]
        progress("start-up to first /health 200: " + ", ".join(
            f"{s.name} {s.figures['startup_s'] * 1000:.0f} ms" for s in servers))

        time.sleep(args.settle)
        for server in servers:
            server.figures["idle_rss_kib"] = proc_status(server.pid)["VmRSS"]

        for server in servers:
            create_crons(server, args.crons)
        progress(f"created {args.crons} crons on each product server through the API")

        seed = args.seed
        base_time = 1_764_460_800
        for server in servers:
            bodies = wave(server.cron_ids, 0, seed, args.dup, args.reorder, base_time)
            result = drive(server.port, bodies, args.clients, server.headers())
            burst = summarize(len(bodies), result["seconds"], result["latencies"], result["errors"])
            burst["peak_rss_kib"] = proc_status(server.pid)["VmHWM"]
            server.figures["burst"] = burst
            progress(f"burst {server.name}: {len(bodies)} callbacks, "
                     f"{burst['callbacks_per_s']:.0f}/s, p99 {burst['p99_ms']:.1f} ms, "
                     f"peak RSS {burst['peak_rss_kib'] / 1024:.1f} MiB, errors {burst['errors']}")

        per_wave = len(wave(list(range(1, args.crons + 1)), 1, seed, args.dup, args.reorder, base_time))
        waves = max(1, -(-args.sustained // per_wave))
        rounds = max(1, min(args.rounds, waves)) if args.driver == "python" else args.rounds
        state = {}
        for server in servers:
            state[server.name] = {
                "rss_start": proc_status(server.pid)["VmRSS"],
                "write_start": proc_write_bytes(server.pid),
                "cpu_start": proc_cpu_seconds(server.pid),
                "size_start": server.storage_bytes(),
                "seconds": 0.0, "callbacks": 0, "latencies": [], "errors": [], "rounds": [],
                "next_wave": 1,
            }
        if args.driver == "wrk":
            progress(f"sustained: wrk, {rounds} rounds of {args.round_seconds} s per server")
        else:
            progress(f"sustained: {waves} waves x {per_wave} callbacks per server, in {rounds} rounds")
        for r in range(rounds):
            numbers = range(1 + r * waves // rounds, 1 + (r + 1) * waves // rounds)
            # Rotate the order each round so no server always follows the same neighbour.
            for server in servers[r % len(servers):] + servers[:r % len(servers)]:
                st = state[server.name]
                if args.driver == "wrk":
                    count = -(-int(args.max_rate * args.round_seconds) // per_wave)
                    first = st["next_wave"]
                    bodies = [b for n in range(first, first + count)
                              for b in wave(server.cron_ids, n, seed, args.dup, args.reorder, base_time)]
                    got = drive_wrk(server.port, bodies, args.clients, server.token,
                                    args.round_seconds, server.workdir)
                    st["next_wave"] = first + -(-got["callbacks"] // per_wave)
                    sent = got["callbacks"]
                    st["errors"].extend(["wrk: non-200 or socket error"] * got["errors"])
                    st["rounds"].append({k: round(v, 4) for k, v in got.items()})
                else:
                    bodies = [b for n in numbers
                              for b in wave(server.cron_ids, n, seed, args.dup, args.reorder, base_time)]
                    result = drive(server.port, bodies, args.clients, server.headers())
                    sent = len(bodies)
                    st["latencies"].extend(result["latencies"])
                    st["errors"].extend(result["errors"])
                    got = summarize(sent, result["seconds"], result["latencies"], result["errors"])
                    st["rounds"].append({k: got[k] for k in ("callbacks", "seconds", "p50_ms",
                                                             "p95_ms", "p99_ms", "errors")})
                    st["next_wave"] = numbers.stop
                st["seconds"] += st["rounds"][-1]["seconds"]
                st["callbacks"] += sent
            latest = {s.name: state[s.name]["rounds"][-1] for s in servers}
            progress(f"sustained round {r + 1}/{rounds}: " + ", ".join(
                f"{name} {got['callbacks'] / got['seconds']:.0f}/s" for name, got in latest.items()))

        for server in servers:
            st = state[server.name]
            per_round = st["rounds"]
            sustained = {
                "callbacks": st["callbacks"],
                "seconds": round(st["seconds"], 4),
                # Medians over the rounds: one noisy neighbour's burst moves one round only.
                "callbacks_per_s": round(statistics.median(
                    x["callbacks"] / x["seconds"] for x in per_round), 1),
                "p50_ms": round(statistics.median(x["p50_ms"] for x in per_round), 3),
                "p95_ms": round(statistics.median(x["p95_ms"] for x in per_round), 3),
                "p99_ms": round(statistics.median(x["p99_ms"] for x in per_round), 3),
                "errors": len(st["errors"]),
                "first_error": st["errors"][0] if st["errors"] else None,
                "rounds": per_round,
            }
            status = proc_status(server.pid)
            written = proc_write_bytes(server.pid) - st["write_start"]
            cpu = proc_cpu_seconds(server.pid) - st["cpu_start"]
            executions = (st["next_wave"] - 1) * len(server.cron_ids)
            size_end = server.storage_bytes()
            sustained.update({
                "executions": executions,
                "cpu_us_per_callback": round(cpu / st["callbacks"] * 1e6, 1),
                "rss_start_kib": st["rss_start"],
                "rss_end_kib": status["VmRSS"],
                "rss_growth_kib": status["VmRSS"] - st["rss_start"],
                "peak_rss_kib": status["VmHWM"],
                "write_bytes": written,
                "write_bytes_per_callback": round(written / st["callbacks"], 1),
                "storage_growth_bytes": None if size_end is None else size_end - st["size_start"],
                "storage_growth_per_run": None if size_end is None
                else round((size_end - st["size_start"]) / executions, 1),
            })
            server.figures["sustained"] = sustained
            server.figures["rows"] = row_counts(server)

        if args.slow_seconds:
            for server in servers:
                server.stop()  # idle now: the slow-work servers get the machine to themselves
            designs = [("sqlite_on", {})]
            if args.baseline:
                designs.append(("baseline", baseline_env(args.baseline, os.path.join(base, "slow"))))
            for design, extra in designs:
                name = f"slow_{design}"
                path = os.path.join(base, name, "qlshadow.db")
                server = make_product(name, python, base, f"sqlite:///{path}", True, args.threads,
                                      db_path=path, extra_env={**extra, **slow_env(2)})
                progress(f"{name}: seeding {args.slow_runs:,} Runs in the gate's window and "
                         f"{args.slow_runs // 20:,} older ones")
                cron_ids = seed_database(python, server.env, 100, args.slow_runs, args.slow_runs // 20)
                servers.append(server)
                server.start()
                got = slow_work(server.port, server.token, cron_ids, args.slow_seconds, python,
                                server.env)
                server.stop()
                slow_figures[design] = got
                progress(f"{name}: {got['callbacks']} callbacks beside {got['installs']} installs, "
                         f"{got['gates']} gates, {got['pages']} pages, {got['prunes']} prunes: "
                         f"p99 {got['p99_ms']:.1f} ms, max {got['max_ms']:.1f} ms, "
                         f"errors {got['errors']}")
    finally:
        for server in servers:
            server.stop()
        for db_name in pg_databases:
            try:
                pg_query(python, pg_url_for(args.pg_url, "postgres"),
                         f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')
            except Exception as exc:
                progress(f"could not drop PostgreSQL database {db_name}: {exc}")
        if args.keep:
            progress(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)

    results = {
        "command": " ".join(["python3", "scripts/bench.py", *sys.argv[1:]]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "smoke": args.smoke,
        "machine": machine(python, args.workdir or tempfile.gettempdir(), pg_version),
        "params": {k: getattr(args, k) for k in ("crons", "clients", "threads", "sustained",
                                                  "dup", "reorder", "write_floor", "starts",
                                                  "rounds", "seed", "driver", "round_seconds")},
        "write_floor": floor_writes,
        "write_floor_normal": floor_normal,
        "servers": {s.name: s.figures for s in servers if not s.name.startswith("slow_")},
        "slow_work": slow_figures,
        "skipped": skipped,
    }
    if args.variants:
        counters = subprocess.run([python, child("counters")], cwd=ROOT, capture_output=True,
                                  text=True, timeout=120, check=True)
        results["metrics_counters_us"] = round(float(counters.stdout), 3)
    results["budgets"] = budgets(results)
    results["references"] = references(results)
    return results


def paired_ratio(a: dict, b: dict) -> float:
    """Median over the rounds of a's callbacks/s over b's in the same round (side by side)."""
    ra, rb = a["sustained"]["rounds"], b["sustained"]["rounds"]
    values = [(x["callbacks"] / x["seconds"]) / (y["callbacks"] / y["seconds"])
              for x, y in zip(ra, rb, strict=True) if x["seconds"] and y["seconds"] and y["callbacks"]]
    return round(statistics.median(values), 3) if values else float("inf")


def references(results: dict) -> list:
    """Ratios that are not budgets but show what the stack itself allows."""
    s = results["servers"]
    floor, write, on = s["floor"]["sustained"], s["floor_write"]["sustained"], s["sqlite_on"]["sustained"]

    def ratio(a, b):
        return round(a / b, 3) if b else float("inf")

    rows = [
        {"figure": "write reference callbacks/s / floor requests/s",
         "value": paired_ratio(s["floor_write"], s["floor"])},
        {"figure": "Shadow-on callbacks/s / write reference",
         "value": paired_ratio(s["sqlite_on"], s["floor_write"])},
        {"figure": "write reference server CPU per callback / floor's",
         "value": ratio(write["cpu_us_per_callback"], floor["cpu_us_per_callback"])},
        {"figure": "Shadow-on server CPU per callback / floor's",
         "value": ratio(on["cpu_us_per_callback"], floor["cpu_us_per_callback"])},
    ]
    for name in s:
        if name.startswith(("pg_", "on_", "ds_", "baseline")):
            rows.append({"figure": f"{name} callbacks/s / floor requests/s",
                         "value": paired_ratio(s[name], s["floor"])})
            rows.append({"figure": f"{name} p99 / floor p99",
                         "value": ratio(s[name]["sustained"]["p99_ms"], floor["p99_ms"])})
    if "baseline" in s:
        rows.append({"figure": "Shadow-on callbacks/s / baseline's",
                     "value": paired_ratio(s["sqlite_on"], s["baseline"])})
        rows.append({"figure": "Shadow-on server CPU per callback / baseline's",
                     "value": ratio(on["cpu_us_per_callback"],
                                    s["baseline"]["sustained"]["cpu_us_per_callback"])})
    # Shadow on / off of the same design, where both sides ran: PostgreSQL, no fsync, and
    # a database at its steady size.
    for on_name, off_name in (("pg_on", "pg_off"), ("ds_synchronous_off", "ds_off_synchronous_off"),
                              ("ds_synchronous_normal", "ds_off_synchronous_normal"),
                              ("ds_steady", "ds_off_steady")):
        if on_name in s and off_name in s:
            rows.append({"figure": f"{on_name} / {off_name} callbacks/s",
                         "value": paired_ratio(s[on_name], s[off_name])})
    # The designs at synchronous=normal against the one-row floor at normal.
    wfn = (results.get("write_floor_normal") or {}).get("bytes_per_transaction")
    for name in ("ds_synchronous_normal", "ds_off_synchronous_normal"):
        if name in s and wfn:
            rows.append({"figure": f"{name} bytes written per callback / write floor (normal)",
                         "value": ratio(s[name]["sustained"]["write_bytes_per_callback"], wfn)})
    counters = results.get("metrics_counters_us")
    if counters is not None:
        # What the two counters of a callback cost, timed in a loop: a bound on the
        # metrics on / off ratio that the noise of a throughput ratio cannot blur.
        rows.append({"figure": "metrics counters, CPU per callback (us)", "value": counters})
        rows.append({"figure": "metrics counters / Shadow-on server CPU per callback",
                     "value": round(counters / on["cpu_us_per_callback"], 5)})
    return rows


def budgets(results: dict) -> list:
    """The issue's budgets as ratios of figures from this run (SQLite; Shadow on unless said)."""
    s = results["servers"]
    floor, off, on = s["floor"], s["sqlite_off"], s["sqlite_on"]
    wf = results["write_floor"]["bytes_per_transaction"] or 1

    def ratio(a, b):
        return round(a / b, 3) if b else float("inf")

    rows = [
        ("callbacks/s / floor requests/s", paired_ratio(on, floor), ">=", 0.70),
        ("Shadow-on / Shadow-off callbacks/s", paired_ratio(on, off), ">=", 0.90),
        ("p99 latency / floor p99", ratio(on["sustained"]["p99_ms"], floor["sustained"]["p99_ms"]),
         "<=", 2.0),
        ("idle RSS / floor idle RSS", ratio(on["idle_rss_kib"], floor["idle_rss_kib"]), "<=", 1.10),
        ("peak RSS in the burst / floor peak", ratio(on["burst"]["peak_rss_kib"],
                                                     floor["burst"]["peak_rss_kib"]), "<=", 1.15),
        (f"RSS growth over {on['sustained']['callbacks']} callbacks (MiB)",
         round(on["sustained"]["rss_growth_kib"] / 1024, 3), "<=", 2.0),
        # Issue 23's: against the one-row floor at the same synchronous level.
        ("bytes written per callback / write floor, Shadow on",
         ratio(on["sustained"]["write_bytes_per_callback"], wf), "<=", 2.5),
        ("bytes written per callback / write floor, Shadow off",
         ratio(off["sustained"]["write_bytes_per_callback"], wf), "<=", 1.5),
        ("start to first /health 200 / floor's", ratio(on["startup_s"], floor["startup_s"]),
         "<=", 1.5),
    ]
    if "on_nometrics" in s:
        rows.append(("metrics on / off callbacks/s", paired_ratio(on, s["on_nometrics"]), ">=", 0.98))
    out = []
    for figure, value, op, limit in rows:
        ok = value >= limit if op == ">=" else value <= limit
        out.append({"figure": figure, "value": value, "op": op, "limit": limit, "pass": ok})
    return out


def render(results: dict) -> str:
    """The figures and budgets as plain-text tables."""
    servers = results["servers"]
    names = list(servers)
    lines = [f"# {results['command']}",
             "# " + ", ".join(f"{k}={v}" for k, v in results["machine"].items()), ""]

    def get(fig, path):
        value = fig
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    rows = [
        ("start to /health 200 (ms)", ("startup_s",), 1000),
        ("idle RSS (MiB)", ("idle_rss_kib",), 1 / 1024),
        ("burst callbacks", ("burst", "callbacks"), 1),
        ("burst callbacks/s", ("burst", "callbacks_per_s"), 1),
        ("burst p99 (ms)", ("burst", "p99_ms"), 1),
        ("burst peak RSS (MiB)", ("burst", "peak_rss_kib"), 1 / 1024),
        ("sustained callbacks", ("sustained", "callbacks"), 1),
        ("sustained callbacks/s", ("sustained", "callbacks_per_s"), 1),
        ("p50 (ms)", ("sustained", "p50_ms"), 1),
        ("p95 (ms)", ("sustained", "p95_ms"), 1),
        ("p99 (ms)", ("sustained", "p99_ms"), 1),
        ("server CPU per callback (us)", ("sustained", "cpu_us_per_callback"), 1),
        ("errors (burst+sustained)", None, 1),
        ("RSS growth, sustained (MiB)", ("sustained", "rss_growth_kib"), 1 / 1024),
        ("peak RSS (MiB)", ("sustained", "peak_rss_kib"), 1 / 1024),
        ("bytes written per callback", ("sustained", "write_bytes_per_callback"), 1),
        ("db+WAL growth per Run (bytes)", ("sustained", "storage_growth_per_run"), 1),
        ("Shadow Runs stored", ("rows", "runs"), 1),
        ("accept failures stored", ("rows", "accept_failures"), 1),
    ]
    width = max(len(r[0]) for r in rows)
    lines.append(f"{'':{width}}  " + "  ".join(f"{n:>11}" for n in names))
    for label, path, scale in rows:
        cells = []
        for n in names:
            if path is None:
                value = servers[n]["burst"]["errors"] + servers[n]["sustained"]["errors"]
            else:
                value = get(servers[n], path)
            if value is None:
                cells.append(f"{'-':>11}")
            elif scale == 1 and isinstance(value, int):
                cells.append(f"{value:>11}")
            else:
                v = value * scale
                cells.append(f"{v:>11.{1 if abs(v) >= 10 else 2}f}")
        lines.append(f"{label:{width}}  " + "  ".join(cells))
    slow = results.get("slow_work") or {}
    if slow:
        lines += ["", "Callbacks beside slow work (SQLite, Shadow on: crontab installs of 2 s, "
                      "7-day gates, pages, prunes):"]
        rows = [("callbacks", "callbacks"), ("p50 (ms)", "p50_ms"), ("p99 (ms)", "p99_ms"),
                ("max (ms)", "max_ms"), ("over 1 s", "over_1s"), ("installs", "installs"),
                ("gates", "gates"), ("pages", "pages"), ("prunes", "prunes"),
                ("errors", "errors")]
        lines.append(f"  {'':40}" + "".join(f"{n:>14}" for n in slow))
        for label, key in rows:
            lines.append(f"  {label:40}" + "".join(f"{slow[n][key]:>14}" for n in slow))
        for kind in ("installs", "gates", "pages", "prunes"):
            lines.append(f"  {'callbacks answered inside one of ' + kind:40}"
                         + "".join(f"{slow[n]['answered_inside'][kind]:>14}" for n in slow))
    for key in ("write_floor", "write_floor_normal"):
        wf = results.get(key)
        if wf:
            lines += ["" if key == "write_floor" else "",
                      f"write floor, synchronous={wf.get('synchronous', 'normal')}: "
                      f"{wf['bytes_per_transaction']} bytes per one-row transaction "
                      f"({wf['transactions']} transactions)"]
    if results["skipped"]:
        lines.append("skipped: " + "; ".join(f"{k}: {v}" for k, v in results["skipped"].items()))
    lines += ["", "References (not budgets: what the stack itself allows):"]
    rw = max(len(r["figure"]) for r in results["references"])
    for r in results["references"]:
        lines.append(f"  {r['figure']:{rw}}  {r['value']:>8.3f}")
    lines += ["", "Budgets (SQLite, Shadow on unless said):"]
    bw = max(len(b["figure"]) for b in results["budgets"])
    for b in results["budgets"]:
        mark = "pass" if b["pass"] else "FAIL"
        if results["smoke"]:
            mark = "(smoke: not judged)"
        lines.append(f"  {b['figure']:{bw}}  {b['value']:>8.3f} {b['op']} {b['limit']:<5}  {mark}")
    return "\n".join(lines)


def default_python() -> str:
    """This interpreter if it can run the servers, else the repository's virtualenv."""
    if all(find_spec(m) for m in ("flask", "waitress", "peewee")):
        return sys.executable
    venv = os.path.join(ROOT, ".venv", "bin", "python")
    return venv if os.path.exists(venv) else sys.executable


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench.py", description=__doc__.split("\n\n")[0],
        epilog="Budgets are judged on SQLite with Shadow on unless said; --smoke runs tiny "
               "counts in seconds and judges nothing.")
    parser.add_argument("--crons", type=int, default=200, help="crons firing at once (default 200)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent keep-alive clients (16)")
    parser.add_argument("--threads", type=int, default=None,
                        help="waitress threads per server (default: the floor 4, waitress's "
                             "default; the product its own QL_THREADS default)")
    parser.add_argument("--sustained", type=int, default=50_000, metavar="N",
                        help="callbacks per server in the sustained run (default 50000)")
    parser.add_argument("--driver", choices=("wrk", "python"), default=None,
                        help="sustained-run client: wrk (default when installed) or Python threads")
    parser.add_argument("--round-seconds", type=int, default=5,
                        help="with wrk: seconds per server per round (5)")
    parser.add_argument("--max-rate", type=int, default=12000,
                        help="with wrk: callbacks/s no server reaches (sizes each round's bodies)")
    parser.add_argument("--variants", action="store_true",
                        help="also run other serving designs side by side (the Flask route, "
                             "callbacks on worker threads, Python's default switch interval, "
                             "metrics off)")
    parser.add_argument("--design-space", action="store_true",
                        help="also run more points around the shipped design: thread counts, "
                             "the lock lane, the checkpoint interval, no retention step, "
                             "the page cache, and synchronous=off as a bound")
    parser.add_argument("--design", action="append", default=[], metavar="NAME",
                        choices=[d[0] for d in DESIGN_SPACE],
                        help="run only this --design-space point (repeatable): "
                             + ", ".join(d[0] for d in DESIGN_SPACE))
    parser.add_argument("--baseline", metavar="REF",
                        help="also run the product as of this git commit (Shadow on, SQLite) "
                             "side by side, as the server 'baseline'")
    parser.add_argument("--slow-seconds", type=float, default=30, metavar="S",
                        help="seconds of callbacks beside crontab installs (2 s each), gates, "
                             "pages and prunes, on SQLite with Shadow on (30; 0 skips it)")
    parser.add_argument("--slow-runs", type=int, default=1_000_000, metavar="N",
                        help="Runs in the gate's window during the slow work (1000000)")
    parser.add_argument("--dup", type=float, default=0.10, help="share of duplicated callbacks (0.10)")
    parser.add_argument("--reorder", type=float, default=0.05,
                        help="share of executions whose finish arrives first (0.05)")
    parser.add_argument("--write-floor", type=int, default=20_000, metavar="N",
                        help="one-row transactions in the write floor (default 20000)")
    parser.add_argument("--starts", type=int, default=3,
                        help="start-ups per server; the median is reported (3)")
    parser.add_argument("--rounds", type=int, default=10,
                        help="rounds the sustained run is split into, rotating servers (10)")
    parser.add_argument("--settle", type=float, default=0.5,
                        help="seconds to wait after start-up before reading idle RSS (0.5)")
    parser.add_argument("--seed", type=int, default=446, help="seed of the generated load")
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/",
                        help="PostgreSQL server; a uniquely named database is created and "
                             "dropped there ('' skips PostgreSQL)")
    parser.add_argument("--python", default=None,
                        help="interpreter for the servers (needs flask, waitress, peewee)")
    parser.add_argument("--workdir", default=None, help="where the temp dir goes (default: $TMPDIR)")
    parser.add_argument("--json", default="bench-results.json", metavar="PATH",
                        help="where to write the JSON results (default ./bench-results.json)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (databases, logs)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny counts, a few seconds, no judgement: checks the harness works")
    parser.add_argument("--serve-floor", action="store_true",
                        help="run the floor app in this process (QL_PORT, QL_THREADS) and exit")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.serve_floor:
        import runpy
        runpy.run_path(child("floor_app"), run_name="__main__")
        return 0
    if args.smoke:
        args.crons, args.sustained, args.write_floor = 6, 150, 300
        args.clients, args.starts, args.rounds, args.settle = 4, 1, 2, 0.1
        args.slow_seconds, args.slow_runs = min(args.slow_seconds, 3), 2000
    args.python = args.python or default_python()
    if args.driver is None:
        args.driver = "wrk" if shutil.which("wrk") else "python"
    if args.smoke:
        args.round_seconds = 1
    if not sys.platform.startswith("linux"):
        print("bench.py: needs Linux (/proc/<pid>/status and /proc/<pid>/io)", file=sys.stderr)
        return 2
    results = run(args)
    with open(args.json, "w") as fh:
        json.dump(results, fh, indent=2)
    print(render(results))
    progress(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
