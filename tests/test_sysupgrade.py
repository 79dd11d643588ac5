"""A firmware upgrade end to end (docs/INSTALL.md, "Upgrade"): while a real server takes
callbacks from a thread, `qlshadow backup --keep-list` (what /lib/upgrade/qlshadow.sh runs)
snapshots the database and rewrites sysupgrade's list; the listed files are tarred as
sysupgrade tars them and unpacked into a fresh root as the new firmware does; the service
started there holds every Run acknowledged before the backup, with its old token."""
from __future__ import annotations

import subprocess
import tarfile
import threading
import time

from operator import itemgetter

from qlshadow import config
from qlshadow.storage import db
from qlshadow.storage.models import ShadowRun
from qlshadow.core.shadow.reader import logical_row
from helpers import SHADOW_ON, LiveServer, Serve, clean_env, http, run_cli, stop_process

CRON = {"name": "backup", "command": "task backup.sh", "schedule": "*/5 * * * *"}


def execution_id(n: int) -> str:
    return f"legacy-system:{1764460800 + n}:{n:08x}-9d4a-4e6b-8f1a-2c3d4e5f6a7b"


def callback(cron_id: int, eid: str, status: int) -> dict:
    body = {"ids": [cron_id], "status": status, "pid": 4242, "log_path": "backup/1.log",
            "last_execution_time": 1764460800, "execution_id": eid}
    return body if status == 0 else {**body, "last_running_time": 1, "exit_code": 0}


class Callbacks(threading.Thread):
    """Sends the start and the finish of one execution after another until stopped;
    acked holds (execution id, monotonic time) of every finish answered 200."""

    def __init__(self, server, cron_id: int):
        super().__init__(daemon=True)
        self.server, self.cron_id = server, cron_id
        self.acked, self.sent, self.stopping = [], [], threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            eid = execution_id(n)
            self.sent.append(eid)
            for status in (0, 1):
                code, _ = http("PUT", self.server.url + "/open/crons/status",
                               callback(self.cron_id, eid, status), self.server.headers, timeout=10)
            if code == 200:
                self.acked.append((eid, time.monotonic()))
            n += 1

    def wait_for(self, count: int) -> None:
        deadline = time.monotonic() + 60
        while len(self.acked) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(self.acked) >= count, "the callbacks did not get through"


def tar_as_sysupgrade(listed: str, archive: str) -> None:
    """sysupgrade: strip the leading '/' of each listed path, tar them from /, gzip."""
    with open(listed, encoding="utf-8") as fh:
        relative = "".join(line[1:] + "\n" for line in fh.read().splitlines() if line)
    with open(listed, "w", encoding="utf-8") as fh:
        fh.write(relative)
    with open(archive, "wb") as out:
        packed = subprocess.run(["tar", "-c", "-C", "/", "-T", listed], capture_output=True,
                                check=True).stdout
        out.write(subprocess.run(["gzip"], input=packed, capture_output=True,
                                 check=True).stdout)


def stored_keys(url: str) -> dict:
    database = db.make_database(url)
    db.bind(database)
    try:
        with database.connection_context():
            rows = map(logical_row, ShadowRun.select().dicts())
            return {row["idempotency_key"]: row["state"]
                    for row in sorted(rows, key=itemgetter("idempotency_key"))}
    finally:
        database.close()


def serve(env: dict, log_path: str):
    """`qlshadow serve` as the init script starts it (no command before it); (process, port)."""
    server = Serve(env=clean_env(env), log_path=log_path).start()
    return server.process, server.port


def test_a_backup_during_callbacks_restores_every_acknowledged_run_in_a_new_root(
        backend, db_url, tmp_path):
    old = tmp_path / "old"
    data = old / "srv" / "qlshadow"
    if backend == "sqlite":
        db_url = f"sqlite:///{data}/qlshadow.db"  # the package's layout: in the data dir
    conf = old / "etc" / "qlshadow" / "qlshadow.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(f"QL_DATA_DIR={data}\nQL_DB_URL={db_url}\n")
    env = {"QL_CONFIG": str(conf), "QL_DATA_DIR": str(data), "QL_DB_URL": db_url,
           "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": "", **SHADOW_ON}
    server = LiveServer(env)
    try:
        status, body = http("POST", server.url + "/open/crons", CRON, server.headers)
        assert status == 200, body
        sender = Callbacks(server, body["data"]["id"])
        sender.start()
        try:
            sender.wait_for(10)
            listed = tmp_path / "sysupgrade.conffiles"
            listed.write_text(f"{conf}\n")
            began = time.monotonic()
            result = run_cli(env, "--config", str(conf), "backup", "--keep-list", str(listed))
            sender.wait_for(len(sender.acked) + 5)  # callbacks go on after the snapshot
        finally:
            sender.stopping.set()
            sender.join(30)
    finally:
        server.stop()
    before = {eid for eid, at in sender.acked if at < began}
    archive = str(tmp_path / "backup.tar.gz")
    tar_as_sysupgrade(str(listed), archive)
    new = tmp_path / "new"
    new.mkdir()
    subprocess.run(["tar", "-C", str(new), "-xzf", archive], check=True)

    with tarfile.open(archive) as packed:
        names = {name.rsplit("/", 1)[-1] for name in packed.getnames()}
    assert {"qlshadow.conf", "token.json"} <= names
    assert not names & {"qlshadow.db", "qlshadow.db-wal", "qlshadow.db-shm", "prune.reserve"}
    restored_data = f"{new}{data}"
    url = db_url if backend == "postgres" else f"sqlite:///{restored_data}/qlshadow.db"
    process, port = serve({"QL_CONFIG": f"{new}{conf}", "QL_DATA_DIR": restored_data,
                           "QL_DB_URL": url, "QL_HOST": "127.0.0.1", "QL_PORT": "0",
                           "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": "", **SHADOW_ON},
                          str(tmp_path / "new.log"))
    try:
        # The old token.json came through, and its token is in the restored database.
        status, _ = http("GET", f"http://127.0.0.1:{port}/open/crons", None, server.headers)
    finally:
        stop_process(process)
    log = (tmp_path / "new.log").read_text()
    stored = stored_keys(url)

    assert status == 200
    assert before and before <= set(stored)
    assert set(stored) <= set(sender.sent)
    assert all(stored[eid] == "exited" for eid in before)
    if backend == "sqlite":
        assert "qlshadow.db.snapshot" in names
        assert result.stdout.strip() == f"{data}/qlshadow.db.snapshot"
        assert f"qlshadow: restored the database {restored_data}/qlshadow.db from its snapshot" in log
    else:
        assert "nothing to snapshot" in result.stderr
        assert not [name for name in names if name.startswith("qlshadow.db")]
        assert {eid for eid, _ in sender.acked} <= set(stored)
    assert config.load(environ={"QL_DATA_DIR": restored_data}).data_dir == restored_data
