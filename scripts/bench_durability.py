#!/usr/bin/env python3
"""What QL_SQLITE_SYNCHRONOUS=full costs against normal, side by side in one run.

For each design and with Shadow off and on, starts `qlshadow serve` on a fresh data dir
(its own process, a free loopback port, stopped by its PID) and drives the same crond
waves over HTTP (scripts/bench.py's wave and drive). The designs: `normal`, `full` (as
shipped: the callbacks of one poll share one fsync, app/storage/group_commit.py) and `full-each`
(serving.serve(group_commit=False): each commit fsyncs, as before the group commit).
With --connections new every callback comes on a connection of its own, as task.sh sends
it, instead of over keep-alive clients. Two passes per server:

  disk     the data dir on this machine's disk: callbacks/s, the server's CPU per
           callback, and bytes it sent to storage per callback (/proc/PID/io write_bytes)
  lazyfs   the data dir on tests/lazyfs.py (FUSE, when it can mount): fsyncs per callback
           and bytes written to files per callback, counted exactly at the file system

Rounds alternate the order of the servers so a noisy neighbour hits all of them alike;
the table shows each figure's median over the rounds. Prints the table (Markdown) on
stdout, progress on stderr; --json writes the raw figures.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, os.path.join(ROOT, "tests")]

from bench import drive, proc_cpu_seconds, proc_write_bytes, wave  # noqa: E402
from harness import Serve, clean_env  # noqa: E402

# design -> (QL_SQLITE_SYNCHRONOUS, serving.serve's group_commit)
DESIGNS = {"normal": ("normal", True), "full": ("full", True), "full-each": ("full", False)}
SERVE_VARIANT = os.path.join(HERE, "bench_children", "serve_variant.py")


def progress(message: str) -> None:
    print(f"[bench_durability] {message}", file=sys.stderr, flush=True)


class Product:
    """`qlshadow serve` with one synchronous level on a fresh data dir; stopped by its PID."""

    def __init__(self, data_dir: str, design: str, shadow: bool):
        self.data_dir = data_dir
        level, grouped = DESIGNS[design]
        env = clean_env({"QL_DATA_DIR": data_dir, "QL_HOST": "127.0.0.1", "QL_PORT": "0",
                         "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": "",
                         "QL_SQLITE_SYNCHRONOUS": level,
                         "QL3_SHADOW_ORIGINS": "scheduled_system" if shadow else ""})
        subprocess.run([sys.executable, "-m", "qlshadow.cli", "token", "system"], env=env,
                       cwd=ROOT, check=True, capture_output=True, timeout=120)
        with open(os.path.join(data_dir, "token.json")) as fh:
            self.token = json.load(fh)["value"]
        self.serve = Serve([sys.executable, SERVE_VARIANT, json.dumps({"group_commit": grouped})],
                           env=env, log_path=os.path.join(data_dir, "serve.log"), timeout=60).start()
        self.process, self.port = self.serve.process, self.serve.port

    def headers(self) -> dict:
        return {"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"}

    def create_crons(self, count: int) -> list:
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        ids = []
        for n in range(count):
            conn.request("POST", "/open/crons", headers=self.headers(), body=json.dumps(
                {"name": f"bench {n}", "command": f"task bench_{n}.sh",
                 "schedule": f"{n % 60} * * * *"}).encode())
            response = conn.getresponse()
            raw = response.read()
            if response.status != 200:
                raise RuntimeError(f"creating a cron failed: {response.status} {raw[:200]!r}")
            ids.append(json.loads(raw)["data"]["id"])
        conn.close()
        return ids

    def stop(self) -> None:
        self.serve.stop()


def bodies_for(cron_ids: list, callbacks: int) -> list:
    """Whole crond waves (every cron starts, then finishes) until `callbacks` are reached."""
    bodies: list = []
    number = 0
    base_time = int(time.time()) - 86_400
    while len(bodies) < callbacks:
        bodies += wave(cron_ids, number, seed=23, dup=0.0, reorder=0.0, base_time=base_time)
        number += 1
    return bodies[:callbacks]


def drive_new_connections(port: int, bodies: list, clients: int, headers: dict) -> dict:
    """Send bodies from `clients` threads, each callback on a new connection (as task.sh)."""
    import http.client
    import itertools
    import threading
    counter, errors = itertools.count(), []

    def client():
        while (i := next(counter)) < len(bodies):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            try:
                conn.request("PUT", "/open/crons/status", body=bodies[i], headers=headers)
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    errors.append(f"{response.status}")
            except (OSError, http.client.HTTPException) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"seconds": time.perf_counter() - began, "errors": errors}


def one_pass(data_dir: str, design: str, shadow: bool, args, fs=None) -> dict:
    """Drive one fresh server; returns its figures (per callback where it says so)."""
    os.makedirs(data_dir)
    product = Product(data_dir, design, shadow)
    send = drive if args.connections == "kept" else drive_new_connections
    try:
        bodies = bodies_for(product.create_crons(args.crons), args.callbacks)
        cpu0, io0 = proc_cpu_seconds(product.process.pid), proc_write_bytes(product.process.pid)
        fs0 = fs.stats() if fs else None
        result = send(product.port, bodies, args.clients, product.headers())
        cpu1, io1 = proc_cpu_seconds(product.process.pid), proc_write_bytes(product.process.pid)
        fs1 = fs.stats() if fs else None
    finally:
        product.stop()
    if result["errors"]:
        raise RuntimeError(f"{len(result['errors'])} callbacks failed, e.g. {result['errors'][0]}")
    n = len(bodies)
    figures = {"callbacks": n, "callbacks_per_s": n / result["seconds"],
               "cpu_ms_per_callback": 1000 * (cpu1 - cpu0) / n,
               "storage_bytes_per_callback": (io1 - io0) / n}
    if fs:
        figures.update(fsyncs_per_callback=(fs1["fsyncs"] - fs0["fsyncs"]) / n,
                       file_bytes_per_callback=(fs1["bytes_written"] - fs0["bytes_written"]) / n)
    return figures


def run(args) -> dict:
    base = tempfile.mkdtemp(prefix="qlshadow-durability-", dir=args.dir)
    configs = [(design, shadow) for shadow in (False, True) for design in args.design]
    raw: dict = {f"{design} shadow {'on' if shadow else 'off'}": [] for design, shadow in configs}
    fs = None
    try:
        from lazyfs import LazyFS, MountFailed
        try:
            fs = LazyFS(os.path.join(base, "lazy-backing"), os.path.join(base, "lazy")).__enter__()
        except MountFailed as exc:
            progress(f"no fsync counts: {exc}")
        for round_number in range(args.rounds):
            order = configs if round_number % 2 == 0 else configs[::-1]
            for design, shadow in order:
                name = f"{design} shadow {'on' if shadow else 'off'}"
                progress(f"round {round_number + 1}: {name}")
                tag = f"{round_number}-{design}-{int(shadow)}"
                figures = one_pass(os.path.join(base, "disk", tag), design, shadow, args)
                if fs:
                    counted = one_pass(os.path.join(fs.mount, tag), design, shadow, args, fs)
                    figures.update(fsyncs_per_callback=counted["fsyncs_per_callback"],
                                   file_bytes_per_callback=counted["file_bytes_per_callback"])
                raw[name].append(figures)
    finally:
        if fs:
            fs.close()
        shutil.rmtree(base, ignore_errors=True)
    return {"args": vars(args), "raw": raw,
            "median": {name: {key: statistics.median(r[key] for r in rounds)
                              for key in rounds[0]} for name, rounds in raw.items()}}


def render(results: dict) -> str:
    columns = (("callbacks_per_s", "callbacks/s", "{:.0f}"),
               ("cpu_ms_per_callback", "CPU ms/callback", "{:.2f}"),
               ("storage_bytes_per_callback", "bytes to storage/callback", "{:,.0f}"),
               ("file_bytes_per_callback", "bytes written/callback (FUSE)", "{:,.0f}"),
               ("fsyncs_per_callback", "fsyncs/callback", "{:.3f}"))
    lines = ["| design, Shadow | " + " | ".join(title for _, title, _ in columns) + " |",
             "|---|" + "---:|" * len(columns)]
    for name, figures in results["median"].items():
        cells = [fmt.format(figures[key]) if key in figures else "n/a" for key, _, fmt in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callbacks", type=int, default=4000, help="callbacks per pass")
    parser.add_argument("--crons", type=int, default=20, help="crons in each wave")
    parser.add_argument("--clients", type=int, default=4, help="concurrent HTTP clients")
    parser.add_argument("--connections", choices=("kept", "new"), default="kept",
                        help="keep-alive clients, or a new connection per callback (task.sh)")
    parser.add_argument("--design", action="append", choices=tuple(DESIGNS),
                        help="designs to run (repeatable; default: all)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (order alternates)")
    parser.add_argument("--dir", default=None,
                        help="where the fresh data dirs go (a disk, not a tmpfs: fsync is free there)")
    parser.add_argument("--json", default=None, help="also write the raw figures here")
    args = parser.parse_args(argv)
    args.design = args.design or list(DESIGNS)
    results = run(args)
    print(render(results))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
