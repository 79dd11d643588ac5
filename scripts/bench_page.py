#!/usr/bin/env python3
"""What the status page and /metrics cost: memory of `qlshadow serve`, and callbacks/s with
the metrics counters on and off, measured side by side in one run.

    .venv/bin/python scripts/bench_page.py [--callbacks 3000] [--clients 8] [--rounds 3]

memory:  the floor (bench.py's Flask + waitress app, no database) and one server on SQLite,
         in the same run, each on its own defaults: idle RSS, then RSS and peak (VmHWM) after
         the same callback burst; for the server also after signing in and loading every page
         and /metrics. Each figure is reported as a ratio to the floor's.
counters: two servers on their own SQLite files, the product and a variant whose counting is
         switched off (Settings.count_metrics=False, bench_children/serve_variant.py); the same callback
         waves go to each in alternating rounds, and the ratio of the medians is reported.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

from harness import FLOOR_STARTUP, ROOT, Serve, clean_env, stop_process

HERE = os.path.dirname(os.path.abspath(__file__))
# Counting off: Settings.count_metrics=False (bench_children/serve_variant.py), else as shipped.
SERVE_ON = ("-m", "qlshadow.cli", "serve")
SERVE_OFF = (os.path.join(HERE, "bench_children", "serve_variant.py"), '{"counters": "nometrics"}')


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process: less disturbed by neighbours than wall time."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_kib(pid: int) -> dict:
    with open(f"/proc/{pid}/status") as fh:
        return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in fh)
                if k in ("VmRSS", "VmHWM")}


class Server:
    """`qlshadow serve` (or a launcher variant) on a free loopback port; stopped by its PID."""

    def __init__(self, name: str, args: tuple, python: str):
        self.dir = tempfile.mkdtemp(prefix=f"qlshadow-{name}-")
        self.env = clean_env(dict(QL_DATA_DIR=self.dir, QL_HOST="127.0.0.1", QL_PORT="0",
                                  QL_SCHEDULER="node", QL_CRONTAB_INSTALL="",
                                  QL3_SHADOW_ORIGINS="scheduled_system"))
        subprocess.run([python, "-m", "qlshadow.cli", "token", "system"], env=self.env, cwd=ROOT,
                       check=True, capture_output=True)
        with open(os.path.join(self.dir, "token.json")) as fh:
            self.token = json.load(fh)["value"]
        self.serve = Serve([python, *args], env=self.env, timeout=60).start()
        self.process, self.port = self.serve.process, self.serve.port

    def call(self, method, path, body=None, headers=None, conn=None):
        own = conn is None
        conn = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        head = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        head.update(headers or {})
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        conn.request(method, path, body=data, headers=head)
        response = conn.getresponse()
        raw = response.read()
        if own:
            conn.close()
        return response.status, raw, response

    def stop(self):
        stop_process(self.process)
        shutil.rmtree(self.dir, ignore_errors=True)


class Floor(Server):
    """bench.py's floor app (Flask + waitress, no database) on a free loopback port."""

    def __init__(self, python: str):
        self.token = "none"
        self.dir = tempfile.mkdtemp(prefix="qlshadow-floor-")
        self.serve = Serve([python, os.path.join(HERE, "bench_children", "floor_app.py")],
                           env=clean_env({"QL_PORT": "0"}), cwd=self.dir, timeout=60,
                           line=FLOOR_STARTUP).start()
        self.process, self.port = self.serve.process, self.serve.port


def make_crons(server: Server, count: int) -> list:
    ids = []
    for n in range(count):
        status, raw, _ = server.call("POST", "/open/crons", {
            "name": f"job-{n}", "command": f"task job{n}.sh", "schedule": f"{n % 60} * * * *"})
        assert status == 200, raw
        ids.append(json.loads(raw)["data"]["id"])
    return ids


def bodies(cron_ids: list, pairs: int, seed: str) -> list:
    """Running + finished callbacks with execution ids, in order per execution."""
    out, base = [], int(time.time()) - pairs
    for n in range(pairs):
        cron = cron_ids[n % len(cron_ids)]
        v4 = uuid.UUID(bytes=uuid.uuid5(uuid.NAMESPACE_URL, f"{seed}{n}").bytes, version=4)
        eid = f"legacy-system:{base + n}:{v4}"
        out.append((cron, {"ids": [cron], "status": 0, "pid": 1000 + n, "execution_id": eid,
                           "last_execution_time": base + n}))
        out.append((cron, {"ids": [cron], "status": 1, "pid": 1000 + n, "execution_id": eid,
                           "exit_code": n % 7 == 0 and 1 or 0, "last_running_time": 3}))
    return out


def drive(server: Server, work: list, clients: int) -> float:
    """Send the callbacks from `clients` threads (each execution's pair on one thread); calls/s."""
    lanes = [[] for _ in range(clients)]
    for i in range(0, len(work), 2):
        lanes[(i // 2) % clients].extend(work[i:i + 2])
    errors = []

    def lane(items):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        for _, body in items:
            status, raw, _ = server.call("PUT", "/open/crons/status", body, conn=conn)
            if status != 200:
                errors.append(raw)
        conn.close()
    threads = [threading.Thread(target=lane, args=(items,)) for items in lanes]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - began
    if errors:
        raise RuntimeError(f"{len(errors)} callbacks failed: {errors[0][:200]!r}")
    return len(work) / seconds


def sign_in_and_load_every_page(server: Server, cron_ids: list) -> tuple:
    """Sign in with the system token, then load each page once.

    Returns (pages loaded, {page kind: [HTML bytes, RSS KiB after its first load]}), in the
    order loaded, so what each kind of page adds to the process shows.
    """
    form = urllib.parse.urlencode({"token": server.token})
    status, _, response = server.call("POST", "/page/login", form,
                                      {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 303, status
    cookie = response.getheader("Set-Cookie").split(";", 1)[0]
    steps = {"signed in": [0, proc_kib(server.process.pid)["VmRSS"]]}
    paths = [("crons", "/page/"), ("crons page 2", "/page/?page=2&size=20"),
             ("gate", "/page/gate"), ("health", "/page/health"), ("login", "/page/login")]
    paths += [("cron", f"/page/crons/{c}") for c in cron_ids]
    for kind, path in paths:
        status, raw, _ = server.call("GET", path, headers={"Cookie": cookie})
        assert status == 200, (path, status, raw[:200])
        if kind not in steps:
            steps[kind] = [len(raw), proc_kib(server.process.pid)["VmRSS"]]
    return len(paths), steps


def floor_memory(python: str, callbacks: int, clients: int) -> dict:
    """The floor's idle RSS and its peak after the same burst the server gets (two waves)."""
    floor = Floor(python)
    try:
        time.sleep(0.5)
        figures = {"idle_rss_kib": proc_kib(floor.process.pid)["VmRSS"]}
        ids = list(range(1, 51))
        drive(floor, bodies(ids, callbacks // 2, "m"), clients)
        drive(floor, bodies(ids, callbacks // 2, "m2"), clients)
        figures["peak_kib"] = proc_kib(floor.process.pid)["VmHWM"]
        return figures
    finally:
        floor.stop()


def memory(python: str, callbacks: int, clients: int) -> dict:
    floor = floor_memory(python, callbacks, clients)
    server = Server("memory", SERVE_ON, python)
    try:
        time.sleep(0.5)
        figures = {"idle_rss_kib": proc_kib(server.process.pid)["VmRSS"]}
        ids = make_crons(server, 50)
        drive(server, bodies(ids, callbacks // 2, "m"), clients)
        after_burst = proc_kib(server.process.pid)
        figures.update(burst_rss_kib=after_burst["VmRSS"], burst_peak_kib=after_burst["VmHWM"])
        figures["pages_loaded"], figures["rss_kib_after_first_page_of_kind"] = \
            sign_in_and_load_every_page(server, ids)
        status, raw, _ = server.call("GET", "/metrics")
        assert status == 403  # the system token has no metrics scope; the page path is what counts
        after_pages = proc_kib(server.process.pid)
        figures.update(pages_rss_kib=after_pages["VmRSS"], pages_peak_kib=after_pages["VmHWM"])
        drive(server, bodies(ids, callbacks // 2, "m2"), clients)
        final = proc_kib(server.process.pid)
        figures.update(burst_after_pages_rss_kib=final["VmRSS"], final_peak_kib=final["VmHWM"])
        figures["floor"] = floor
        figures["ratios"] = {
            "idle / floor idle": round(figures["idle_rss_kib"] / floor["idle_rss_kib"], 3),
            "peak, page never loaded / floor peak":
                round(figures["burst_peak_kib"] / floor["peak_kib"], 3),
            "peak after every page / floor peak":
                round(figures["pages_peak_kib"] / floor["peak_kib"], 3),
            "peak after more callbacks / floor peak":
                round(figures["final_peak_kib"] / floor["peak_kib"], 3)}
        return figures
    finally:
        server.stop()


def counters(python: str, callbacks: int, clients: int, rounds: int) -> dict:
    on, off = Server("metrics-on", SERVE_ON, python), Server("metrics-off", SERVE_OFF, python)
    try:
        ids = {s: make_crons(s, 20) for s in (on, off)}
        rates = {"on": [], "off": []}
        cpu = {"on": [], "off": []}
        for r in range(rounds):
            order = ((on, "on"), (off, "off")) if r % 2 == 0 else ((off, "off"), (on, "on"))
            for server, name in order:
                work = bodies(ids[server], callbacks // 2, f"{name}{r}")
                before = cpu_seconds(server.process.pid)
                rates[name].append(drive(server, work, clients))
                cpu[name].append((cpu_seconds(server.process.pid) - before) / len(work))
        on_rate, off_rate = statistics.median(rates["on"]), statistics.median(rates["off"])
        on_cpu, off_cpu = statistics.median(cpu["on"]), statistics.median(cpu["off"])
        return {"rounds": rounds, "callbacks_per_round": callbacks, "clients": clients,
                "on_per_s": [round(x, 1) for x in rates["on"]],
                "off_per_s": [round(x, 1) for x in rates["off"]],
                "ratio_on_over_off": round(on_rate / off_rate, 3),
                "server_cpu_us_per_callback_on": round(on_cpu * 1e6, 1),
                "server_cpu_us_per_callback_off": round(off_cpu * 1e6, 1),
                "cpu_ratio_off_over_on": round(off_cpu / on_cpu, 3)}
    finally:
        on.stop()
        off.stop()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    parser.add_argument("--callbacks", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=("memory", "counters"))
    args = parser.parse_args(argv)
    results = {}
    if args.only in (None, "memory"):
        results["memory"] = memory(args.python, args.callbacks, args.clients)
        print(json.dumps({"memory": results["memory"]}), flush=True)
    if args.only in (None, "counters"):
        results["counters"] = counters(args.python, args.callbacks, args.clients, args.rounds)
        print(json.dumps({"counters": results["counters"]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
