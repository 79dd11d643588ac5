"""The SQLite WAL under a stream of callbacks: bounded, and reused in place (CONTRACT.md
"Storage on SQLite"). SQLite only: PostgreSQL keeps no WAL file of ours."""
from __future__ import annotations

import itertools
import os
import uuid

import pytest

from qlshadow.storage import db

SHADOW_ON = {"QL3_SHADOW_ORIGINS": "scheduled_system"}


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize("shadow_env", [SHADOW_ON], indirect=True)
def test_the_wal_stays_bounded_and_is_reused_in_place_across_checkpoints(client, auth,
                                                                        make_cron, settings):
    crons = [make_cron(name=f"job {n}")["id"] for n in range(50)]
    wal = db.database.obj.database + "-wal"
    sizes = []
    for wave in range(20):  # about 1,400 WAL frames: five checkpoints and more
        execution = {cron: f"legacy-system:{1764460800 + wave * 60}:{uuid.uuid4()}" for cron in crons}
        for status in (0, 1):
            for cron in crons:
                answer = client.put("/open/crons/status", headers=auth, json={
                    "ids": [cron], "status": status, "pid": 100 + cron,
                    "log_path": f"/tmp/{wave}-{cron}.log", "execution_id": execution[cron]})
                assert answer.status_code == 200
                sizes.append(os.path.getsize(wal))

    with db.connected():
        conn = db.database.obj.connection()
        frame = conn.execute("PRAGMA page_size").fetchone()[0] + 24  # one WAL frame
        cycle = db.wal_checkpoint_pages(conn) * frame + 32
    # Checkpoints ran: the WAL started over instead of growing with every callback.
    assert max(sizes) < 2 * cycle
    assert len(sizes) * 3 * frame > 4 * cycle  # the callbacks wrote several WALs' worth
    # Bounded: at most the checkpoint point plus one transaction, within the truncation size.
    assert max(sizes) <= db.WAL_LIMIT_BYTES
    # Reused in place: once grown to a cycle's size the file is never cut and grown again
    # (truncating at the checkpoint point cost a metadata write and a slower fdatasync).
    grown = next(n for n, size in enumerate(sizes) if size >= cycle)
    assert all(b >= a for a, b in itertools.pairwise(sizes[grown:]))
