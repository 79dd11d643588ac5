"""On a full partition `qlshadow prune` still deletes (it releases its reserve file first and
makes it again once there is room), and the status page's first sign-in is refused with a
503 sentence, never a 500 (docs/CONTRACT.md "Retention", "The status page")."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from qlshadow import config
from qlshadow.storage import db
from qlshadow.core.auth import create_app_record, system_token
from qlshadow.storage.retention import RESERVE_BYTES, RESERVE_NAME
from qlshadow.web.views import create_app
from helpers import ROOT, STATUS_PATH
from invariants import Inspector

from .helpers import fill_disk

pytestmark = pytest.mark.faults


def _cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
    return subprocess.run([sys.executable, "-m", "qlshadow.cli", *args], env={**full, **env},
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_prune_on_a_full_partition_releases_its_reserve_and_deletes(small_tmpfs, tmp_path,
                                                                    backend):
    db_url = f"sqlite:///{small_tmpfs}/qlshadow.db"
    env = {"QL_DATA_DIR": small_tmpfs, "QL_DB_URL": db_url, "QL_SCHEDULER": "node",
           "QL_CRONTAB_INSTALL": "", "QL_CRONTAB_FILE": str(tmp_path / "crontab.list"),
           "QL3_SHADOW_ORIGINS": "scheduled_system"}
    app = create_app(config.load(environ=env))
    reserve = os.path.join(small_tmpfs, RESERVE_NAME)
    assert os.path.getsize(reserve) == RESERVE_BYTES  # made when the server starts
    client = app.test_client()
    with db.database.connection_context(), db.write_transaction():
        headers = {"Authorization": "Bearer " + system_token(os.path.join(small_tmpfs,
                                                                          "token.json"))["value"]}
    cron = client.post("/open/crons", json={"name": "job", "command": "true",
                                            "schedule": "* * * * *"}, headers=headers)
    cron_id = cron.get_json()["data"]["id"]
    executions = 300
    for n in range(executions):
        at = 1_764_460_800 + 60 * n
        body = {"ids": [cron_id], "status": 1, "pid": 1000 + n, "exit_code": 0,
                "last_execution_time": at, "execution_id": f"legacy-system:{at}:{uuid.uuid4()}"}
        assert client.put(STATUS_PATH, json=body, headers=headers).status_code == 200
    with Inspector(db_url) as inspector:
        inspector.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # deleting must grow it
    db.discard_connection()
    filler, _ = fill_disk(small_tmpfs)

    pruned = _cli({**env, "QL_RETENTION_ROWS_PER_CRON": "1"}, "prune")

    assert pruned.returncode == 0, pruned.stderr
    done = json.loads(pruned.stdout)
    assert (done["runs"], done["reserve_released"]) == (executions - 1, True), done

    os.unlink(filler)
    with Inspector(db_url) as inspector:
        assert inspector.integrity() == "ok"
        assert len(inspector.rows("shadow_runs")) == 1
    again = _cli(env, "prune")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["reserve"] == "in place"
    assert os.path.getsize(reserve) == RESERVE_BYTES


def test_the_first_sign_in_on_a_full_disk_is_a_503_page_not_a_500(small_tmpfs, make_settings,
                                                                   backend):
    app = create_app(make_settings(QL_DATA_DIR=small_tmpfs))
    client = app.test_client()
    with db.database.connection_context(), db.write_transaction():
        viewer = create_app_record("viewer", ["crons", "runs"])
    form = {"client_id": viewer[0], "client_secret": viewer[1]}
    filler, _ = fill_disk(small_tmpfs)

    response = client.post("/page/login", data=form, headers={"Origin": "http://localhost"})

    assert response.status_code == 503
    text = response.get_data(as_text=True)
    assert "signing key" in text and "qlshadow prune" in text
    assert not os.path.exists(os.path.join(small_tmpfs, "page.key"))
    assert [n for n in os.listdir(small_tmpfs) if n.startswith(".page.key")] == []

    os.unlink(filler)
    response = client.post("/page/login", data=form, headers={"Origin": "http://localhost"})
    assert response.status_code == 303
    assert client.get("/page/").status_code == 200
    db.discard_connection()


def test_the_reserve_is_private_made_once_and_not_made_for_postgresql(make_settings, backend):
    settings = make_settings()
    create_app(settings)
    path = os.path.join(settings.data_dir, RESERVE_NAME)
    db.discard_connection()
    if backend == "postgres":
        assert not os.path.exists(path)
        return
    assert os.stat(path).st_mode & 0o777 == 0o600
    with open(path, "rb") as fh:
        first = fh.read()
    assert len(first) == RESERVE_BYTES and first.count(0) < RESERVE_BYTES // 100  # random
    create_app(settings)  # a restart does not write it again
    db.discard_connection()
    with open(path, "rb") as fh:
        assert fh.read() == first
