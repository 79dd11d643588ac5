#!/usr/bin/env python3
"""How soon an alert goes out, and what the in-service sender costs (issue 38).

  delay     a real `qlshadow serve` (SQLite, or --db-url) with an ntfy channel pointed at a
            loopback receiver in this process: --rounds crons fail (a finish callback with
            exit code 1) and then recover (exit code 0); each delay is from the moment the
            finish callback was sent to the moment the receiver got the message.
  callbacks the latency of --callbacks ordinary callbacks (running + idle, exit 0: no state
            change) on --baseline's server, and on this tree's while the receiver answers
            and while it hangs (it takes the request and never answers;
            QL_NOTIFY_TIMEOUT=30 keeps the sender waiting), rotating in --phases rounds.
  memory    the server's RSS and threads: idle after start (no alert sent yet), beside the
            same for --baseline REF (a tree before the sender) started the same way; and
            again once the alerts above were sent and the sender thread ended.

Prints a JSON document. A missed firing needs crond's minutes, not a bench:
tests/test_alert_sender.py checks that it is told within grace + 60 s with the tick's
`now`.
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
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from harness import Serve, clean_env  # noqa: E402


class Receiver:
    """A loopback HTTP receiver: when each message arrived; hangs while `hold` is set."""

    def __init__(self):
        self.arrived: list = []  # (monotonic time, title)
        self.hold = threading.Event()
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                receiver.arrived.append((time.monotonic(), self.headers.get("Title", "")))
                if receiver.hold.is_set():
                    receiver.release.wait()
                    return
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def request(method: str, url: str, body=None, token: str = "", timeout: float = 60):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as answer:
        return json.loads(answer.read())


def start(base: str, db_url: str, extra: dict, pythonpath: str | None = None) -> tuple:
    """(Serve, token) of a server on a fresh data dir."""
    env = clean_env({"QL_DATA_DIR": base, "QL_DB_URL": db_url, "QL_HOST": "127.0.0.1",
                     "QL_PORT": "0", "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": "",
                     **extra})
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy",
                 "ALL_PROXY"):
        env.pop(name, None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    made = subprocess.run([sys.executable, "-m", "qlshadow.cli", "token", "system"], env=env,
                          cwd=base, capture_output=True, text=True, timeout=60)
    if made.returncode != 0:
        raise RuntimeError(f"qlshadow token system: {made.stderr.strip()}")
    with open(os.path.join(base, "token.json")) as fh:
        token = json.load(fh)["value"]
    server = Serve(env=env, cwd=base)
    server.start()
    return server, token


def proc_status(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                out["rss_kib"] = int(line.split()[1])
            elif line.startswith("Threads:"):
                out["threads"] = int(line.split()[1])
    return out


def finish(url: str, token: str, cron_id: int, code: int, pid: int) -> None:
    for status, extra in ((0, {}), (1, {"exit_code": code})):
        request("PUT", url + "/open/crons/status",
                {"ids": [cron_id], "status": status, "pid": pid, "log_path": f"b/{pid}.log",
                 **extra}, token)


def pct(values: list, q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def ms(value: float) -> float:
    return round(value * 1000, 2)


def wait_arrival(receiver: Receiver, count: int, limit: float = 60) -> float:
    end = time.monotonic() + limit
    while len(receiver.arrived) < count:
        if time.monotonic() > end:
            raise RuntimeError("the alert did not arrive within a minute")
        time.sleep(0.002)
    return receiver.arrived[count - 1][0]


def bench_delays(url: str, token: str, receiver: Receiver, rounds: int) -> dict:
    crons = [request("POST", url + "/open/crons",
                     {"name": f"job{i}", "command": "true", "schedule": "@once"},
                     token)["data"]["id"] for i in range(rounds)]
    delays = {"failed": [], "recovered": []}
    pid = 1000
    for kind, code in (("failed", 1), ("recovered", 0)):
        for cron_id in crons:
            pid += 1
            expected = len(receiver.arrived) + 1
            request("PUT", url + "/open/crons/status",
                    {"ids": [cron_id], "status": 0, "pid": pid, "log_path": f"b/{pid}.log"},
                    token)
            sent = time.monotonic()
            request("PUT", url + "/open/crons/status",
                    {"ids": [cron_id], "status": 1, "pid": pid, "log_path": f"b/{pid}.log",
                     "exit_code": code}, token)
            delays[kind].append(wait_arrival(receiver, expected) - sent)
    return {kind: {"p50_ms": ms(statistics.median(v)), "p95_ms": ms(pct(v, 0.95)),
                   "max_ms": ms(max(v)), "n": len(v)} for kind, v in delays.items()}


def callback_latencies(url: str, token: str, cron_id: int, n: int, pid0: int) -> list:
    out = []
    for i in range(n // 2):
        for status, extra in ((0, {}), (1, {"exit_code": 0})):
            started = time.monotonic()
            request("PUT", url + "/open/crons/status",
                    {"ids": [cron_id], "status": status, "pid": pid0 + i,
                     "log_path": f"c/{pid0 + i}.log", **extra}, token)
            out.append(time.monotonic() - started)
    return out


def bench_callbacks(targets: dict, receiver: Receiver, n: int, phases: int) -> dict:
    """Callback latencies on the baseline server ("main"), on this tree's while the receiver
    answers ("answering") and while it hangs ("hanging"), in rotating order per phase."""
    ordinary = {name: request("POST", url + "/open/crons",
                              {"name": "ordinary", "command": "true", "schedule": "@once"},
                              token)["data"]["id"]
                for name, (url, token) in targets.items()}
    kinds = ["main", "answering", "hanging"]
    runs: dict = {kind: [] for kind in kinds}
    pid = 100000
    url, token = targets["sender"]
    for phase in range(phases):
        # Rotating which comes first, so that a growing history and the machine's other
        # work weigh on all three alike.
        for kind in kinds[phase % 3:] + kinds[:phase % 3]:
            if kind == "hanging":
                # A failure makes the sender send to a receiver that never answers.
                victim = request("POST", url + "/open/crons",
                                 {"name": f"victim{phase}", "command": "true",
                                  "schedule": "@once"}, token)["data"]["id"]
                receiver.release.clear()
                receiver.hold.set()
                expected = len(receiver.arrived) + 1
                finish(url, token, victim, 1, pid - 1)
                wait_arrival(receiver, expected)  # the sender now hangs in its send
            pid += n
            server = "main" if kind == "main" else "sender"
            runs[kind] += callback_latencies(targets[server][0], targets[server][1],
                                             ordinary[server], n, pid)
            if kind == "hanging":
                receiver.hold.clear()
                receiver.release.set()
    summary = {k: {"p50_ms": ms(statistics.median(v)), "p99_ms": ms(pct(v, 0.99)), "n": len(v)}
               for k, v in runs.items()}
    for a, b in (("hanging", "answering"), ("answering", "main"), ("hanging", "main")):
        for q, name in ((0.5, "p50"), (0.99, "p99")):
            summary[f"{name}_ratio_{a}_vs_{b}"] = round(pct(runs[a], q) / pct(runs[b], q), 3)
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="crons that fail, then recover")
    parser.add_argument("--callbacks", type=int, default=1000, help="callbacks per phase")
    parser.add_argument("--phases", type=int, default=3)
    parser.add_argument("--baseline", default="main",
                        help="git ref of the tree before the sender (callbacks and idle RSS)")
    parser.add_argument("--db-url", default="", help="this tree's database (default: a new "
                        "SQLite file); with it, --baseline-db-url: another, empty one")
    parser.add_argument("--baseline-db-url", default="")
    args = parser.parse_args()
    if bool(args.db_url) != bool(args.baseline_db_url):
        parser.error("--db-url and --baseline-db-url go together (two empty databases)")
    work = tempfile.mkdtemp(prefix="bench-alerts-")
    receiver = Receiver()
    servers = []
    try:
        def url_of(name: str) -> str:
            given = args.db_url if name == "sender" else args.baseline_db_url
            return given or f"sqlite:///{work}/{name}/qlshadow.db"
        channel = {"NTFY_URL": receiver.url, "NTFY_TOPIC": "bench", "QL_NOTIFY_TIMEOUT": "30"}
        from bench import baseline_env
        old = baseline_env(args.baseline, os.path.join(work, "tree"))["PYTHONPATH"]
        memory, targets = {}, {}
        for name, path in (("baseline", old), ("sender", None)):
            os.makedirs(os.path.join(work, name))
            server, token = start(os.path.join(work, name), url_of(name), channel, path)
            servers.append(server)
            targets["main" if path else "sender"] = (server.url, token)
            time.sleep(1)
            memory[name + "_idle"] = proc_status(server.process.pid)
        memory["idle_rss_ratio_sender_vs_baseline"] = round(
            memory["sender_idle"]["rss_kib"] / memory["baseline_idle"]["rss_kib"], 3)
        result = {"delays": bench_delays(server.url, token, receiver, args.rounds)}
        end = time.monotonic() + 10
        while proc_status(server.process.pid)["threads"] > memory["sender_idle"]["threads"] \
                and time.monotonic() < end:
            time.sleep(0.05)
        memory["sender_after_alerts"] = proc_status(server.process.pid)
        result["callbacks"] = bench_callbacks(targets, receiver, args.callbacks, args.phases)
        result["memory"] = memory
        result["database"] = "postgresql" if args.db_url else "sqlite"
        print(json.dumps(result, indent=2))
    finally:
        for server in servers:
            server.stop()
        receiver.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
