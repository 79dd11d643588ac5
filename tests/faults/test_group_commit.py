"""Group commit (app/storage/group_commit.py) on a disk that can be slowed or broken on command.

The data dir is on LazyFS (tests/lazyfs.py), which holds the WAL's fsyncs back or fails
them when told. With its fsyncs held, a callback whose commit is not yet on disk must not
be answered; once they go on, it is answered and survives a power cut; the callbacks one
poll read share one fsync; a failed fsync leaves them unanswered and /health says why.

SQLite only: PostgreSQL's commits are its server's. At synchronous=normal nothing waits for
an fsync at all.
"""
from __future__ import annotations

import json
import os
import select
import time
from http.client import HTTPConnection, HTTPException

import pytest

from helpers import LiveServer, http
from invariants import Inspector

from .helpers import execution_id, make_crons

pytestmark = pytest.mark.faults

WAL = "/data/qlshadow.db-wal"  # the WAL's path inside the mount


@pytest.fixture
def start_service(lazyfs, tmp_path):
    """Start `qlshadow serve` with its data dir on the mount, Shadow on, one cron made
    durably; env: more settings."""
    data_dir = os.path.join(lazyfs.mount, "data")
    started = []

    def start(**env):
        server = LiveServer({"QL_DATA_DIR": data_dir, "QL_SCHEDULER": "node",
                             "QL_CRONTAB_INSTALL": "",
                             "QL_CRONTAB_FILE": str(tmp_path / "crontab"),
                             "QL3_SHADOW_ORIGINS": "scheduled_system", **env})
        server.clients = []
        started.append(server)
        server.cron_id = make_crons(server.url, server.headers, 1)[0]
        server.db_url = f"sqlite:///{data_dir}/qlshadow.db"
        with Inspector(server.db_url) as inspector:  # the setup is not what is under test
            inspector.conn.execute("PRAGMA wal_checkpoint(FULL)").fetchall()
        return server

    yield start
    lazyfs.release(WAL)  # a held fsync would keep the server from stopping
    for server in started:
        for client in server.clients:
            client.conn.close()
        server.stop()


@pytest.fixture
def service(start_service):
    return start_service()


class Client:
    """One keep-alive connection sending callbacks, whose answer can be looked for unread."""

    def __init__(self, server):
        self.server = server
        self.conn = HTTPConnection("127.0.0.1", server.port, timeout=30)
        self.conn.connect()
        self.eid = ""
        server.clients.append(self)  # closed by the fixture

    def send(self) -> None:
        """A running callback of a new execution."""
        self.eid = execution_id(int(time.time()))
        body = {"ids": [str(self.server.cron_id)], "status": 0, "pid": 4242,
                "log_path": "job/1.log", "execution_id": self.eid, "last_execution_time": 1}
        self.conn.request("PUT", "/open/crons/status", body=json.dumps(body).encode(),
                          headers={**self.server.headers, "Content-Type": "application/json"})

    def answer_waiting(self, seconds: float) -> bool:
        """True if any byte of an answer reached this connection within seconds."""
        return bool(select.select([self.conn.sock], [], [], seconds)[0])

    def answer(self) -> int:
        response = self.conn.getresponse()
        response.read()
        return response.status

    def call(self) -> str:
        """A running callback answered 200; returns its execution id."""
        self.send()
        assert self.answer() == 200
        return self.eid

    def warm(self) -> None:
        """One request on the connection, so that the server has accepted it before the test."""
        self.conn.request("GET", "/health")
        response = self.conn.getresponse()
        response.read()
        assert response.status == 200


def committing_at_normal(server) -> tuple[Client, str]:
    """A client whose first callback was answered: from then on the loop's connection
    commits at NORMAL and the group commit fsyncs for it. Returns it and that execution id."""
    client = Client(server)
    return client, client.call()


def wait_for(predicate, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


def wal_fsyncs(lazyfs) -> int:
    return lazyfs.stats()["fsyncs_by_path"].get(WAL, 0)


def unread_requests(port: int) -> int:
    """Server-side TCP connections on port holding received bytes nobody has read yet."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                rows = fh.readlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            fields = row.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            rx_queue = int(fields[4].split(":")[1], 16)
            if local_port == port and fields[3] == "01" and rx_queue > 0:  # 01: established
                count += 1
    return count


def test_a_callback_is_answered_only_once_its_commit_is_on_disk(service, lazyfs):
    client, first = committing_at_normal(service)
    lazyfs.hold(WAL)
    client.send()
    # Committed, not yet durable. (Nothing here opens the database meanwhile: the held fsync
    # keeps the WAL's inode locked, as a slow disk would, and SQLite opening it as root
    # would wait for it.)
    wait_for(lambda: lazyfs.stats()["fsyncs_held"] == 1, "the batch's fsync to begin")

    assert not client.answer_waiting(0.3), "answered before its commit was on disk"

    lazyfs.release(WAL)
    assert client.answer() == 200
    service.process.kill()  # the power goes right after the answer
    service.process.wait(30)
    lazyfs.cut()
    with Inspector(service.db_url) as inspector:
        inspector.check(runs_exactly={first, client.eid})


@pytest.mark.parametrize("connections", ["kept", "new"])
def test_callbacks_that_arrive_together_share_one_fsync(service, lazyfs, connections):
    """Eight callbacks arrive while the loop waits in an fsync: on connections it already
    serves, or each on a new one, as task.sh sends them (waitress accepts one connection
    per poll; the loop lane takes all that wait)."""
    first, _ = committing_at_normal(service)
    others = [Client(service) for _ in range(8)] if connections == "kept" else []
    for client in others:
        client.warm()
    lazyfs.hold(WAL)
    first.send()
    wait_for(lambda: lazyfs.stats()["fsyncs_held"] == 1, "the first batch's fsync to begin")
    before = wal_fsyncs(lazyfs)  # the held fsync counts once it goes on
    others = others or [Client(service) for _ in range(8)]
    for client in others:
        client.send()
    wait_for(lambda: unread_requests(service.port) == 8, "the eight callbacks to arrive")

    lazyfs.release(WAL)
    assert [client.answer() for client in [first, *others]] == [200] * 9

    assert wal_fsyncs(lazyfs) - before == 2  # the first batch's, then one for the eight
    with Inspector(service.db_url) as inspector:
        stored = {row["idempotency_key"] for row in inspector.rows("shadow_runs")}
    assert {client.eid for client in [first, *others]} <= stored


def test_a_failed_fsync_answers_no_callback_and_health_says_why(service, lazyfs):
    client, first = committing_at_normal(service)
    lazyfs.fail(WAL)
    client.send()
    with pytest.raises((HTTPException, OSError)):
        client.answer()  # the connection is closed without an answer
    assert lazyfs.stats()["fsyncs_failed"] == 1  # the group's, not one of SQLite's commits

    status, health = http("GET", service.url + "/health")
    assert status == 503
    assert health["data"]["last_write"]["ok"] is False
    assert "Input/output error" in health["data"]["last_write"]["cause"]
    assert "the WAL could not be synced" in service.output()

    lazyfs.heal(WAL)
    unanswered = client.eid
    client = Client(service)
    client.call()
    assert http("GET", service.url + "/health")[1]["data"]["last_write"]["ok"] is True
    # SQLite kept the unanswered callback's commit; the next fsync made it durable too.
    service.process.kill()
    service.process.wait(30)
    lazyfs.cut()
    with Inspector(service.db_url) as inspector:
        inspector.check(runs_exactly={first, unanswered, client.eid})


def test_at_synchronous_normal_no_callback_waits_for_an_fsync(start_service, lazyfs):
    service = start_service(QL_SQLITE_SYNCHRONOUS="normal")
    client = Client(service)
    client.call()
    lazyfs.hold(WAL)  # an fsync now would keep every answer below from coming

    for _ in range(5):
        client.call()
    assert lazyfs.stats()["fsyncs_held"] == 0
