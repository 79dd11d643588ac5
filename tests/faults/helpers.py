"""Helpers of the fault suite: crond-like callback bursts, a private PostgreSQL
cluster, a small tmpfs and a SQLite lock holder (fixtures are in conftest.py).

Every scenario tracks which execution ids it sent and which callbacks were answered 200,
so the invariant check (tests/invariants.py) can demand exactly one Run per execution.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.client import HTTPConnection, HTTPException
from urllib.parse import urlsplit

import pytest
from helpers import ROOT, SHADOW_ON, free_port, http

SHADOW = SHADOW_ON
__all__ = ["free_port"]


# --- crond-like callbacks -------------------------------------------------------------------

def execution_id(seconds: int) -> str:
    """A fresh valid execution id, as task.sh builds it."""
    return f"legacy-system:{seconds}:{uuid.uuid4()}"


@dataclass
class Execution:
    """One crond execution of a cron: a running callback, then an idle one, same id."""
    cron_id: int
    seconds: int
    pid: int
    log_path: str
    exit_code: int
    eid: str = ""

    def __post_init__(self):
        self.eid = self.eid or execution_id(self.seconds)

    def body(self, kind: str) -> dict:
        base = {"ids": [str(self.cron_id)], "pid": self.pid, "log_path": self.log_path,
                "execution_id": self.eid}
        if kind == "running":
            return {**base, "status": 0, "last_execution_time": self.seconds}
        return {**base, "status": 1, "last_running_time": 1, "exit_code": self.exit_code}


def plan(cron_ids, executions: int, start: int = 1_764_460_800) -> dict:
    """{cron_id: [Execution, ...]} with unique pids, log paths and execution ids."""
    return {cron_id: [Execution(cron_id, start + 60 * n, 10_000 * cron_id + n,
                                f"job{cron_id}/{n:04d}.log", 1 if n % 5 == 4 else 0)
                      for n in range(executions)]
            for cron_id in cron_ids}


def send_callback(url: str, token: str, body, method: str = "PUT", timeout: float = 20):
    """One callback over a fresh connection, like curl; returns (status, raw body).

    Connection errors (refused, reset, timeout) propagate: the caller saw no answer.
    """
    parts = urlsplit(url)
    conn = HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request(method, "/open/crons/status", body=data,
                     headers={"Authorization": f"Bearer {token}",
                              "Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def json_error(raw: bytes) -> dict | None:
    """The parsed {"code", "message"} error body, or None when it is anything else."""
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    if isinstance(body, dict) and set(body) == {"code", "message"} and isinstance(body["message"], str):
        return body
    return None


@dataclass
class Burst:
    """Threads that play crond: one thread per cron sends running/idle pairs in order.

    A callback without a 200 leaves its execution pending (the failed callback and the
    rest of that execution) for a later replay. With stop_on_failure the thread then
    stops (the server is gone); otherwise it goes on with its next execution.
    """
    url: str
    token: str
    plans: dict
    stop_on_failure: bool = True
    pause: float = 0.0
    answered: list = field(default_factory=list)     # (eid, kind)
    pending: list = field(default_factory=list)      # (Execution, [kinds left])
    statuses: dict = field(default_factory=dict)     # HTTP status or error name -> count
    bad_answers: list = field(default_factory=list)  # non-200 answers that are not JSON errors
    sent: set = field(default_factory=set)           # eids with at least one callback sent
    halt: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self):
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._play, args=(executions,), daemon=True)
                         for executions in self.plans.values()]

    def start(self) -> Burst:
        for thread in self._threads:
            thread.start()
        return self

    def join(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in self._threads), "burst threads did not finish"

    def count(self, key) -> int:
        with self._lock:
            return self.statuses.get(key, 0)

    def wait_for(self, predicate, timeout: float = 60) -> bool:
        """Poll until predicate(self) holds or the timeout passes (a bound, not an assert)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self):
                return True
            if not any(t.is_alive() for t in self._threads):
                return predicate(self)
            time.sleep(0.01)
        return False

    def _note(self, key) -> None:
        with self._lock:
            self.statuses[key] = self.statuses.get(key, 0) + 1

    def _play(self, executions) -> None:
        for execution in executions:
            if self.halt.is_set():
                return
            kinds = ["running", "idle"]
            for i, kind in enumerate(kinds):
                with self._lock:
                    self.sent.add(execution.eid)
                try:
                    status, raw = send_callback(self.url, self.token, execution.body(kind))
                except (OSError, HTTPException) as exc:
                    status, raw = type(exc).__name__, b""
                self._note(status)
                if status == 200:
                    with self._lock:
                        self.answered.append((execution.eid, kind))
                    continue
                with self._lock:
                    if isinstance(status, int) and json_error(raw) is None:
                        self.bad_answers.append((status, raw[:300]))
                    self.pending.append((execution, kinds[i:]))
                if self.stop_on_failure:
                    return
                break
            if self.pause:
                time.sleep(self.pause)

    def answered_ids(self) -> set:
        return {eid for eid, _ in self.answered}

    def replay(self, url: str, token: str) -> int:
        """Send every pending callback again, in order; each must now be answered 200."""
        count = 0
        for execution, kinds in self.pending:
            for kind in kinds:
                status, raw = send_callback(url, token, execution.body(kind))
                assert status == 200, (status, raw)
                count += 1
        return count


def make_crons(url: str, headers: dict, count: int) -> list:
    """Create crons through the API; returns their ids."""
    ids = []
    for n in range(count):
        status, body = http("POST", url + "/open/crons",
                            {"name": f"job{n}", "command": f"task job{n}.sh",
                             "schedule": "*/5 * * * *"}, headers)
        assert status == 200, body
        ids.append(body["data"]["id"])
    return ids


# --- a private PostgreSQL cluster -----------------------------------------------------------

class PrivatePostgres:
    """A throwaway PostgreSQL cluster on a loopback port: restarting it disturbs no one."""

    def __init__(self, bindir: str, root: str, port: int, as_postgres: list):
        self.bindir, self.root, self.port, self.as_postgres = bindir, root, port, as_postgres
        self.data = os.path.join(root, "data")
        self.log = os.path.join(root, "server.log")

    def _ctl(self, *args: str) -> None:
        subprocess.run(self.as_postgres + [os.path.join(self.bindir, "pg_ctl"), "-D", self.data,
                                           "-l", self.log, "-w", "-t", "60", *args],
                       check=True, capture_output=True, timeout=90)

    def start(self) -> None:
        self._ctl("-o", f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
                        "-c fsync=off -c shared_buffers=16MB -c max_connections=40", "start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "stop")

    def admin(self):
        import psycopg2
        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres",
                                dbname="postgres", connect_timeout=5)
        conn.autocommit = True
        return conn

    def create_database(self) -> str:
        """A new empty database; returns its URL."""
        name = f"qlshadow_fault_{uuid.uuid4().hex[:10]}"
        conn = self.admin()
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        conn.close()
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"


# --- a small tmpfs ---------------------------------------------------------------------------

def db_init(env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    """`qlshadow db init` (the schema's upgrade steps) on env's QL_* settings alone: none of
    this process's own QL_ variables reach it."""
    plain = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
    return subprocess.run([sys.executable, "-m", "qlshadow.cli", "db", "init"], cwd=ROOT,
                          env={**plain, **env}, capture_output=True, text=True, timeout=timeout)


def mounted_tmpfs(size: str):
    """A tmpfs of `size` (mount's size=, e.g. "4m") on a temp dir (root only); a generator
    for a fixture: yields the path, then unmounts it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path = tempfile.mkdtemp(prefix=f"qlshadow-{size}-")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs",
                              path], capture_output=True, text=True)
    if mounted.returncode != 0:
        os.rmdir(path)
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    yield path
    if subprocess.run(["umount", path], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", path], capture_output=True)
    os.rmdir(path)


def fill_disk(directory: str) -> tuple:
    """Write a filler file until the filesystem is full; returns (path, bytes written)."""
    path = os.path.join(directory, "filler")
    written = 0
    chunk = b"\0" * 65536
    with open(path, "wb", buffering=0) as fh:
        while True:
            try:
                written += fh.write(chunk)
            except OSError:
                break
        # Top up the last partial block, so not even a few bytes are left.
        for size in (4096, 512, 1):
            while True:
                try:
                    written += fh.write(chunk[:size])
                except OSError:
                    break
    return path, written


# --- a SQLite lock holder --------------------------------------------------------------------

_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
conn.execute("BEGIN IMMEDIATE")
conn.execute("UPDATE crons SET name = name || '-held'")
print("holding", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
print("released", flush=True)
"""


class SqliteLockHolder:
    """Another process holding SQLite's write lock (BEGIN IMMEDIATE, uncommitted)."""

    def __init__(self, path: str):
        self.process = subprocess.Popen([sys.executable, "-c", _HOLDER, path], text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        line = self.process.stdout.readline()
        assert line.strip() == "holding", f"lock holder failed to start: {line!r}"

    def release(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.write("\n")
            self.process.stdin.flush()
            assert self.process.stdout.readline().strip() == "released"
            self.process.wait(10)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process.stdin.close()
        self.process.stdout.close()

