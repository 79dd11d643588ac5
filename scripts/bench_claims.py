#!/usr/bin/env python3
"""What a `one` cron's claim costs (core/fleet.py): POST /open/crons/<id>/claim on a real
`qlshadow serve` over PostgreSQL on loopback, beside the status callback in the same run.

  won       a claim for a new firing each time: the insert of the claim row (one small write
            transaction), what the first host of a firing pays
  lost      the same firing claimed again: the conflict and the winner read back, what
            every other host pays
  callback  a running + idle pair of status callbacks (Legacy, no execution_id), the work a
            task does anyway, for scale

One keep-alive connection, sequential requests: latency, not throughput. Prints a JSON
document with p50/p99 (ms) of each and the claims' p99 as a ratio of the callback's. The
database is created with a unique name and dropped at the end; the server is stopped by PID.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from harness import Serve, clean_env  # noqa: E402

FIRST = 1_767_225_600  # a minute: every claim of `won` names the next one


def pg_admin(base: str, sql: str) -> None:
    import psycopg2
    conn = psycopg2.connect(base.rstrip("/") + "/postgres")
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


def percentiles(samples: list) -> dict:
    ordered = sorted(samples)
    return {"n": len(ordered), "p50_ms": round(statistics.median(ordered) * 1000, 3),
            "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1] * 1000, 3)}


def timed(conn, method: str, path: str, body: dict, headers: dict, ok: tuple) -> float:
    data = json.dumps(body).encode()
    began = time.perf_counter()
    conn.request(method, path, body=data, headers=headers)
    response = conn.getresponse()
    response.read()
    took = time.perf_counter() - began
    if response.status not in ok:
        raise RuntimeError(f"{method} {path}: HTTP {response.status}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/")
    parser.add_argument("--claims", type=int, default=2000, help="requests of each kind")
    args = parser.parse_args()
    name = f"qlshadow_bench_claims_{uuid.uuid4().hex[:8]}"
    parts = urlsplit(args.pg_url)
    url = urlunsplit((parts.scheme, parts.netloc, "/" + name, "", ""))
    pg_admin(args.pg_url, f'CREATE DATABASE "{name}"')
    work = tempfile.mkdtemp(prefix="qlshadow-bench-claims-")
    try:
        env = clean_env({"QL_DATA_DIR": os.path.join(work, "data"), "QL_DB_URL": url,
                         "QL_HOST": "127.0.0.1", "QL_PORT": "0", "QL_SCHEDULER": "node",
                         "QL_CRONTAB_INSTALL": "", "QL_HOST_NAME": "bench-host"})
        subprocess.run([sys.executable, "-m", "qlshadow.cli", "token", "system"], env=env,
                       cwd=ROOT, check=True, capture_output=True, timeout=60)
        with open(os.path.join(env["QL_DATA_DIR"], "token.json")) as fh:
            token = json.load(fh)["value"]
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        with Serve(env=env) as server:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            conn.request("POST", "/open/crons", body=json.dumps({
                "name": "bench", "command": "true", "schedule": "* * * * *",
                "hosts": ["*"], "hosts_mode": "one"}), headers=headers)
            cron_id = json.loads(conn.getresponse().read())["data"]["id"]
            claim = f"/open/crons/{cron_id}/claim"
            for i in range(50):  # warm-up: connections, statements, imports
                timed(conn, "POST", claim, {"at": FIRST - 3600 * 24 + 60 * i}, headers, (200,))
            won = [timed(conn, "POST", claim, {"at": FIRST + 60 * i}, headers, (200,))
                   for i in range(args.claims)]
            lost = [timed(conn, "POST", claim, {"at": FIRST}, headers, (409,))
                    for _ in range(args.claims)]
            callback = []
            for i in range(args.claims // 2):
                for status in (0, 1):
                    callback.append(timed(conn, "PUT", "/open/crons/status", {
                        "ids": [cron_id], "status": status, "pid": 1000 + i,
                        "log_path": f"b/{i}.log"}, headers, (200,)))
            conn.close()
    finally:
        subprocess.run(["rm", "-rf", work], check=False)
        pg_admin(args.pg_url, f'DROP DATABASE IF EXISTS "{name}"')
    result = {"backend": "postgresql (loopback)", "won": percentiles(won),
              "lost": percentiles(lost), "callback": percentiles(callback)}
    for kind in ("won", "lost"):
        result[f"{kind}_p99_over_callback_p99"] = round(
            result[kind]["p99_ms"] / result["callback"]["p99_ms"], 2)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
