"""The slim Run upgrade (schema step 2) in place, on a partition with less free space than
the database: nothing fails for good, and every Run within the budget is kept.

A version-1 database of 20,000 Runs (about 12 MB, 4 KiB pages, as the previous release
made it) sits on a 16 MiB tmpfs; the Runs move to the slim table in batches that reuse the
pages the old table frees (docs/STORAGE.md, "Upgrade in place").
"""
from __future__ import annotations

import os

import pytest

from invariants import Inspector

from .helpers import db_init, fill_disk, mounted_tmpfs

# slow: each builds a 14 MB database of 20,000 Runs (a load of about 10 s).
pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.parametrize("backend", ["sqlite"])]

RUNS = 20_000
CRONS = 20
START = 1_764_460_800


@pytest.fixture
def tmpfs_16m():
    """A 16 MiB tmpfs: room for the old database and less than its size besides."""
    yield from mounted_tmpfs("16m")




def _version_1_database(db_url: str) -> None:
    """20,000 Runs of 20 crons, one a minute each, as version 1 stored them."""
    from qlshadow.storage import db
    from qlshadow.storage.models import Cron
    from qlshadow.storage.schema import RunV1
    from old_schema import database_at, old_run
    database = database_at(db_url, 1)
    with database.connection_context():
        with database.atomic():
            crons = [Cron.insert(name=f"job{n}", command=f"task job{n}.sh",
                                 schedule="* * * * *", created_at=1, updated_at=2).execute()
                     for n in range(CRONS)]
        rows = [old_run(crons[n % CRONS], START + 60 * (n // CRONS), n,
                        "running" if n >= RUNS - CRONS else "exited",
                        log_path=f"/opt/ql/log/job{n % CRONS}/{n}.log")
                for n in range(RUNS)]
        for at in range(0, RUNS, 500):
            with database.atomic():
                RunV1.insert_many(rows[at:at + 500]).execute()
        database.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    db.discard_connection()


def test_the_slim_upgrade_keeps_every_run_on_a_partition_smaller_than_twice_the_database(
        tmpfs_16m, tmp_path, backend):
    db_url = f"sqlite:///{tmpfs_16m}/qlshadow.db"
    path = f"{tmpfs_16m}/qlshadow.db"
    _version_1_database(db_url)
    size = os.path.getsize(path)
    stat = os.statvfs(tmpfs_16m)
    free = stat.f_bavail * stat.f_frsize
    assert size > 11_000_000 and free < size  # the case the issue names
    with Inspector(db_url) as inspector:
        before = inspector.rows("shadow_runs")
    # A filler takes all but 1 MiB: far less than the slim table's 4 MB, so the move
    # must reuse the old table's pages batch by batch.
    filler, filled = fill_disk(tmpfs_16m)
    os.truncate(filler, filled - 1024 * 1024)
    env = {"QL_DATA_DIR": tmpfs_16m, "QL_DB_URL": db_url, "QL_SCHEDULER": "node",
           "QL_CRONTAB_INSTALL": "", "QL_CRONTAB_FILE": str(tmp_path / "crontab.list")}

    result = db_init(env, timeout=300)

    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert f"{RUNS} Runs moved to the slim table" in result.stderr
    with Inspector(db_url) as inspector:
        assert inspector.integrity() == "ok"
        assert inspector.rows("shadow_runs") == before  # every Run, field for field
        tables = {r[0] for r in inspector.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "shadow_runs_v1" not in tables
        inspector.check(runs_exactly={r["idempotency_key"] for r in before})
    # Grown by at most the first batch (before any page was freed): later ones reuse pages.
    assert os.path.getsize(path) <= size + 256 * 1024


def test_a_move_stopped_by_a_full_disk_goes_on_at_the_next_start(tmpfs_16m, tmp_path, backend):
    db_url = f"sqlite:///{tmpfs_16m}/qlshadow.db"
    _version_1_database(db_url)
    with Inspector(db_url) as inspector:
        before = inspector.rows("shadow_runs")
    env = {"QL_DATA_DIR": tmpfs_16m, "QL_DB_URL": db_url, "QL_SCHEDULER": "node",
           "QL_CRONTAB_INSTALL": "", "QL_CRONTAB_FILE": str(tmp_path / "crontab.list")}
    filler, filled = fill_disk(tmpfs_16m)  # not a byte left: the first batch cannot commit
    os.truncate(filler, filled - 256 * 1024)  # room to open the database and rename

    full = db_init(env, timeout=300)

    assert "Traceback" not in full.stderr
    with Inspector(db_url) as inspector:
        assert inspector.integrity() == "ok"
        moved = inspector.conn.execute("SELECT COUNT(*) FROM shadow_runs").fetchone()[0] \
            if full.returncode == 0 else 0
        left = inspector.conn.execute(
            "SELECT COUNT(*) FROM sqlite_master WHERE name IN ('shadow_runs_v1')").fetchone()[0]
    # Either the step itself did not fit (nothing changed, one line says why) or it did and
    # the move stopped part way: both keep every Run somewhere, and neither is for good.
    assert full.returncode == 0 and left == 1 and moved < RUNS or full.returncode == 1

    os.unlink(filler)
    room = db_init(env, timeout=300)

    assert room.returncode == 0, room.stderr
    with Inspector(db_url) as inspector:
        assert inspector.integrity() == "ok"
        assert inspector.rows("shadow_runs") == before
