"""GroupCommit (app/storage/group_commit.py) on a real SQLite file: which connection runs at NORMAL,
when the WAL is fsynced, and what a failed fsync does. The served path, with answers held
until the fsync and a disk that can be slowed or broken, is tests/faults/test_group_commit.py.

SQLite only: on PostgreSQL the server makes each commit durable itself.
"""
from __future__ import annotations

import sqlite3
import threading
import uuid

import pytest

from qlshadow.storage import db
from qlshadow.storage.group_commit import GroupCommit

pytestmark = pytest.mark.parametrize("backend", ["sqlite"])

FULL, NORMAL = 2, 1  # PRAGMA synchronous's answers


@pytest.fixture
def callback(client, auth, make_cron):
    """Send one running callback of a new execution through the app, on this thread."""
    cron = make_cron()["id"]

    def send():
        answer = client.put("/open/crons/status", headers=auth, json={
            "ids": [cron], "status": 0, "pid": 42, "log_path": "job/1.log",
            "execution_id": f"legacy-system:1764460800:{uuid.uuid4()}"})
        assert answer.status_code == 200
    return send


def synchronous() -> int:
    return db.database.obj.connection().execute("PRAGMA synchronous").fetchone()[0]


def test_the_thread_that_makes_the_group_commits_at_normal_on_every_connection(callback):
    callback()  # opens this thread's connection, at the database's level
    assert synchronous() == FULL

    GroupCommit(db.database.obj)
    assert synchronous() == NORMAL  # the connection it held
    db.discard_connection()
    callback()
    assert synchronous() == NORMAL  # and the next one, from its first commit


def test_a_connection_of_another_thread_keeps_the_database_s_level(callback):
    GroupCommit(db.database.obj)
    seen = []

    def other():
        with db.connected():
            seen.append(synchronous())
    thread = threading.Thread(target=other)
    thread.start()
    thread.join()

    assert seen == [FULL]


def test_the_wal_is_synced_only_after_a_commit_changed_something(callback):
    callback()
    group = GroupCommit(db.database.obj)

    assert group.sync() is True  # nothing committed since it was made
    assert group.syncs == 0
    callback()
    callback()
    assert group.sync() is True
    assert group.syncs == 1  # one fsync for both
    assert group.sync() is True
    assert group.syncs == 1


def test_commits_of_a_connection_closed_since_are_synced_all_the_same(callback):
    # Another connection keeps the WAL from being checkpointed away when ours closes.
    other = sqlite3.connect(db.database.obj.database)
    other.execute("SELECT count(*) FROM crons").fetchone()
    try:
        callback()
        group = GroupCommit(db.database.obj)
        callback()  # at NORMAL: not durable yet
        db.discard_connection()  # as after an error; nothing reopened it

        assert group.sync() is True
        assert group.syncs == 1
        callback()  # a new connection
        assert group.sync() is True
        assert group.syncs == 2
    finally:
        other.close()


def test_a_failed_fsync_is_reported_and_tried_again_at_the_next_sync(callback):
    failures = []
    callback()
    group = GroupCommit(db.database.obj, failures.append)
    callback()
    wal = group.wal
    group.wal = "/proc/self/status"  # opens, but fdatasync fails there (EINVAL)

    assert group.sync() is False
    assert [type(exc) for exc in failures] == [OSError]
    group.wal = wal
    assert group.sync() is True  # nothing new was committed, and still it syncs
    assert group.syncs == 1
    assert group.sync() is True
    assert group.syncs == 1
