"""Power cuts (issue 23): the data dir on LazyFS (tests/lazyfs.py), callbacks arriving from
a few crond-like threads, and at random points the power goes: the server is killed and
every write not yet fsynced is dropped. After each cut the service restarts on what
survived and the database must open, pass integrity_check, hold no execution twice and
keep every answered callback its synchronous level promises (docs/RELIABILITY.md).

SQLite only: PostgreSQL's durability is its own server's (fsync of its WAL at commit).
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from http.client import HTTPException

import pytest

from helpers import ROOT, STARTUP, run_cli
from invariants import Inspector
from lazyfs import LazyFS

from .helpers import execution_id, make_crons, send_callback

pytestmark = pytest.mark.faults

CUTS = int(os.environ.get("QL_POWER_CUTS", "200"))
CRONS = 3  # client threads, one cron each, as crond runs different jobs at once
# How many answers a cut may wait for. At normal the WAL is fsynced only at its checkpoint
# (1 MiB: up to about 160 of these callbacks), so its cuts must reach past one for some of
# them to fall after a checkpoint and find what came before it kept.
MOST_ANSWERS_BEFORE_A_CUT = {"full": 60, "normal": 250}
WAL = "/data/qlshadow.db-wal"  # the WAL's path inside the mount


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


# --- the layer itself: a test that trusted a lossy or a lying layer would prove nothing --------

def test_lazyfs_keeps_fsynced_data_and_drops_the_rest_at_a_cut(lazyfs):
    mnt = lazyfs.mount
    with open(os.path.join(mnt, "kept"), "wb") as fh:
        fh.write(b"synced")
        fh.flush()
        os.fsync(fh.fileno())
        fh.write(b" and not synced")
    _fsync(mnt)  # makes "kept" itself durable, not the bytes after its fsync
    with open(os.path.join(mnt, "unnamed"), "wb") as fh:
        fh.write(b"synced, but its directory entry is not")
        fh.flush()
        os.fsync(fh.fileno())

    assert _read(os.path.join(mnt, "kept")) == b"synced and not synced"
    lazyfs.cut()

    assert _read(os.path.join(mnt, "kept")) == b"synced"
    assert not os.path.exists(os.path.join(mnt, "unnamed"))


def test_lazyfs_refuses_a_write_through_a_handle_opened_before_the_cut(lazyfs):
    path = os.path.join(lazyfs.mount, "file")
    with open(path, "wb") as fh:
        fh.write(b"one")
        fh.flush()
        os.fsync(fh.fileno())
    _fsync(lazyfs.mount)
    fd = os.open(path, os.O_WRONLY)
    try:
        lazyfs.cut()
        with pytest.raises(OSError):
            os.pwrite(fd, b"late", 0)
    finally:
        os.close(fd)

    assert _read(path) == b"one"


_WRITER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode=wal")
conn.execute("PRAGMA synchronous=full")
conn.execute("CREATE TABLE t (n INTEGER)")
conn.execute("INSERT INTO t VALUES (1)")
conn.execute("PRAGMA synchronous=off")  # this commit is never fsynced
conn.execute("INSERT INTO t VALUES (2)")
print([n for n, in conn.execute("SELECT n FROM t")], flush=True)
sys.stdin.readline()
"""


def test_lazyfs_carries_sqlite_in_wal_mode_and_loses_only_unsynced_commits(lazyfs):
    import sqlite3
    path = os.path.join(lazyfs.mount, "t.db")
    # The writer is killed with its connection open, as a power cut leaves it.
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, path], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert writer.stdout.readline().strip() == "[1, 2]"
    finally:
        writer.kill()
        writer.wait(30)
        writer.stdin.close()
        writer.stdout.close()
    lazyfs.cut()
    survivor = sqlite3.connect(path, isolation_level=None)

    assert survivor.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert [n for n, in survivor.execute("SELECT n FROM t")] == [1]
    survivor.close()


# --- the service under power cuts ---------------------------------------------------------------

# Starting Python and importing Flask costs most of a restart; a parent that imported
# them once forks each server instead, so hundreds of cuts fit in a few minutes.
_FORK_SERVER = """
import os, sys
import flask, waitress
import qlshadow.cli, qlshadow.web.views
for line in sys.stdin:
    command, _, arg = line.strip().partition(" ")
    if command == "start":
        pid = os.fork()
        if pid == 0:
            log = os.open(arg, os.O_WRONLY)
            os.dup2(log, 1)
            os.dup2(log, 2)
            code = 1
            try:
                code = qlshadow.cli.main(["serve"])
            finally:
                sys.stdout.flush()
                os._exit(code or 0)
        print(pid, flush=True)
    elif command == "reap":
        os.waitpid(int(arg), 0)
        print("reaped", flush=True)
"""


class Service:
    """`qlshadow serve` on a free loopback port, its data dir on the mount; killed by PID.

    Each server is forked by a parent started once (see _FORK_SERVER); both are ours.
    """

    def __init__(self, env: dict, log_dir: str):
        self.log_dir = log_dir
        self.pid: int | None = None
        self.url = ""
        self.starts = 0
        self._parent = subprocess.Popen([sys.executable, "-c", _FORK_SERVER], env=env, cwd=ROOT,
                                        text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def _ask(self, line: str) -> str:
        self._parent.stdin.write(line + "\n")
        self._parent.stdin.flush()
        return self._parent.stdout.readline().strip()

    def start(self) -> None:
        log_path = os.path.join(self.log_dir, f"serve-{self.starts}.log")
        self.starts += 1
        open(log_path, "wb").close()  # there before the child writes its first line
        self.pid = int(self._ask(f"start {log_path}"))
        while True:
            with open(log_path, "rb") as fh:
                output = fh.read()
            match = STARTUP.search(output)
            if match:
                self.url = match.group(1).decode()
                return
            if _exited(self.pid):
                raise AssertionError("the service did not start on what survived the cut:\n"
                                     + output.decode("utf-8", "replace"))
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL, and wait until it is gone: nothing of it is written after this returns."""
        if self.pid is not None:
            os.kill(self.pid, signal.SIGKILL)
            assert self._ask(f"reap {self.pid}") == "reaped"
            self.pid = None

    def close(self) -> None:
        """Kill the server, then end the forking parent (by its PID) and wait for it."""
        self.kill()
        self._parent.stdin.close()
        self._parent.wait(30)
        self._parent.stdout.close()


def _exited(pid: int) -> bool:
    """True when pid has exited (it stays a zombie until its parent reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


class Load:
    """Crond-like threads sending running/idle pairs until the server stops answering.

    Every 200 is noted with how many WAL fsyncs LazyFS had done once the answer was in:
    any WAL fsync after that carried the callback's commit to the backing file.
    """

    def __init__(self, fs: LazyFS, url: str, token: str, cron_ids: list, clock: list):
        self.fs, self.url, self.token = fs, url, token
        self.answered: list = []  # (execution id, kind, WAL fsyncs seen after the answer)
        self.sent: set = set()
        self.bad: list = []
        self._lock = threading.Lock()
        self._clock = clock  # a shared counter for distinct execution times
        self._threads = [threading.Thread(target=self._play, args=(cron_id,), daemon=True)
                         for cron_id in cron_ids]
        for thread in self._threads:
            thread.start()

    def _wal_fsyncs(self) -> int:
        with self._lock:
            return self.fs.stats()["fsyncs_by_path"].get(WAL, 0)

    def _play(self, cron_id: int) -> None:
        while True:
            with self._lock:
                self._clock[0] += 60
                seconds = self._clock[0]
            eid = execution_id(seconds)
            base = {"ids": [str(cron_id)], "pid": seconds % 100_000, "execution_id": eid,
                    "log_path": f"job{cron_id}/{seconds}.log"}
            for kind, extra in (("running", {"status": 0, "last_execution_time": seconds}),
                                ("idle", {"status": 1, "last_running_time": 1,
                                          "exit_code": 0})):
                with self._lock:
                    self.sent.add(eid)
                try:
                    status, raw = send_callback(self.url, self.token, {**base, **extra})
                except (OSError, HTTPException):
                    return  # the power is out
                if status != 200:
                    with self._lock:
                        self.bad.append((status, raw[:200]))
                    return
                seen = self._wal_fsyncs()
                with self._lock:
                    self.answered.append((eid, kind, seen))

    def count(self) -> int:
        with self._lock:
            return len(self.answered)

    def playing(self) -> bool:
        """True while every client thread is still sending."""
        return all(thread.is_alive() for thread in self._threads)

    def join(self) -> None:
        for thread in self._threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in self._threads), "a client thread hung"


@pytest.mark.slow
@pytest.mark.parametrize("synchronous", ["full", "normal"])
def test_power_cuts_under_callback_load_lose_nothing_the_level_promises(
        lazyfs, tmp_path, synchronous, figures):
    seed = int(os.environ.get("QL_POWER_CUT_SEED", random.SystemRandom().randrange(2**32)))
    rng = random.Random(seed)
    data_dir = os.path.join(lazyfs.mount, "data")
    os.makedirs(tmp_path / "logs")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
    env.update({"QL_HOST": "127.0.0.1", "QL_PORT": "0", "QL_DATA_DIR": data_dir,
                "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": "",
                "QL_CRONTAB_FILE": str(tmp_path / "crontab.list"),
                "QL3_SHADOW_ORIGINS": "scheduled_system", "QL_SQLITE_SYNCHRONOUS": synchronous,
                # Every Run stays: a Run retention removed must not read as one a cut lost.
                "QL_RETENTION_DAYS": "0", "QL_RETENTION_ROWS_PER_CRON": "0"})
    run_cli(env, "token", "system")
    with open(os.path.join(data_dir, "token.json")) as fh:
        token = json.load(fh)["value"]
    _fsync(os.path.join(data_dir, "token.json"))
    _fsync(data_dir)  # the setup is not what is under test: make it durable
    service = Service(env, str(tmp_path / "logs"))
    service.start()
    cron_ids = make_crons(service.url, {"Authorization": f"Bearer {token}"}, CRONS)
    db_url = f"sqlite:///{data_dir}/qlshadow.db"
    with Inspector(db_url) as inspector:  # the crons too are setup, not under test
        inspector.conn.execute("PRAGMA wal_checkpoint(FULL)").fetchall()
    clock = [int(time.time()) - 86_400 * 365]

    promised: dict = {}  # execution id -> "running" or "idle": what must be there
    lost_per_cut: list = []
    sent: set = set()
    try:
        for _ in range(CUTS):
            load = Load(lazyfs, service.url, token, cron_ids, clock)
            target = rng.randrange(MOST_ANSWERS_BEFORE_A_CUT[synchronous])
            while load.count() < target and load.playing():
                time.sleep(0.002)
            time.sleep(rng.random() * 0.02)  # land anywhere, mid-commit included
            service.kill()
            wal_fsyncs_at_cut = lazyfs.stats()["fsyncs_by_path"].get(WAL, 0)
            lazyfs.cut()
            load.join()
            assert not load.bad, load.bad
            sent |= load.sent

            service.start()  # the restart on the surviving files must succeed
            with Inspector(db_url) as inspector:
                inspector.check(runs_within=sent)  # integrity_check, one Run per execution
                states = {row["idempotency_key"]: row["state"]
                          for row in inspector.rows("shadow_runs")}
            lost = 0
            for eid, kind, wal_fsyncs_seen in load.answered:
                if states.get(eid) == "exited" or (kind == "running" and eid in states):
                    if promised.get(eid) != "idle":
                        promised[eid] = kind
                    continue
                must_survive = synchronous == "full" or wal_fsyncs_at_cut > wal_fsyncs_seen
                assert not must_survive, (
                    f"an answered {kind} callback of {eid} is gone after a cut with "
                    f"synchronous={synchronous} (seed {seed})")
                lost += 1
            lost_per_cut.append(lost)
            # What survived a cut stays: a later cut never takes back what was on disk.
            missing = [eid for eid, kind in promised.items()
                       if eid not in states or (kind == "idle" and states[eid] != "exited")]
            assert not missing, f"{len(missing)} callbacks vanished after surviving (seed {seed})"
    finally:
        service.close()

    figures(synchronous=synchronous, cuts=CUTS, seed=seed,
            executions_kept=len(promised), lost_total=sum(lost_per_cut),
            lost_median=sorted(lost_per_cut)[len(lost_per_cut) // 2], lost_max=max(lost_per_cut),
            fs={k: v for k, v in lazyfs.stats().items() if k != "fsyncs_by_path"})
    if synchronous == "full":
        assert sum(lost_per_cut) == 0
    else:  # some cuts fell after a checkpoint: what it made durable was there, and stayed
        assert promised, f"no cut came after a checkpoint (seed {seed})"
