"""A database is never created under a configured mount point that is not mounted yet: the
service exits 75 with one line instead of writing to the filesystem beneath (schema.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from qlshadow import config, db, schema
from conftest import ROOT

UCI_FSTAB = """config global
\toption anon_swap '0'
\toption auto_mount '1'

config mount
\toption target '{target}'
\toption uuid 'e4a1-77c2'
\toption enabled '1'

config mount
\toption target '/mnt/old'
\toption enabled '0'
"""


def test_targets_are_read_from_openwrts_uci_fstab_and_from_etc_fstab(tmp_path):
    uci = tmp_path / "uci"
    uci.write_text(UCI_FSTAB.format(target="/mnt/usb"))
    assert schema.mount_targets(str(uci)) == ["/mnt/usb"]  # the disabled one never mounts
    fstab = tmp_path / "fstab"
    fstab.write_text("# <file system> <mount point> <type>\nUUID=1 / ext4 defaults 0 1\n"
                     "/dev/sda2 none swap sw 0 0\nLABEL=data /srv/my\\040data ext4 noatime 0 2\n")
    assert schema.mount_targets(str(fstab)) == ["/srv/my data"]
    assert schema.mount_targets(str(tmp_path / "missing")) == []


def _settings(tmp_path, db_url: str):
    data = tmp_path / "mnt" / "usb" / "qlshadow"
    return config.load(environ={"QL_DATA_DIR": str(data), "QL_DB_URL": db_url,
                                "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": ""})


@pytest.fixture
def unmounted(tmp_path, monkeypatch):
    """An OpenWrt fstab whose mount point tmp/mnt/usb is not mounted."""
    uci = tmp_path / "fstab"
    uci.write_text(UCI_FSTAB.format(target=tmp_path / "mnt" / "usb"))
    monkeypatch.setattr(schema, "FSTABS", (str(uci),))
    return uci


def test_no_database_is_created_under_an_unmounted_mount_point(tmp_path, unmounted):
    path = tmp_path / "mnt" / "usb" / "qlshadow" / "qlshadow.db"
    with pytest.raises(schema.NotMounted) as raised:
        db.open_database(_settings(tmp_path, f"sqlite:///{path}"))
    assert str(raised.value) == (f"{tmp_path}/mnt/usb is a mount point in {unmounted} that is "
                                 f"not mounted: not creating the database {path} beneath it; "
                                 "start again once it is mounted")
    assert not path.exists()


def test_an_existing_database_under_it_is_opened(tmp_path, unmounted):
    path = tmp_path / "mnt" / "usb" / "qlshadow" / "qlshadow.db"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")  # made on purpose, e.g. before the fstab entry existed
    db.open_database(_settings(tmp_path, f"sqlite:///{path}"))
    with db.database.connection_context():
        assert "crons" in db.database.get_tables()


@pytest.mark.parametrize("backend", ["postgres"])
def test_postgresql_has_no_file_to_guard(tmp_path, unmounted, db_url):
    db.open_database(_settings(tmp_path, db_url))  # the data dir under it holds no database
    with db.database.connection_context():
        assert "crons" in db.database.get_tables()


@pytest.mark.skipif(not os.path.ismount("/dev/shm"), reason="no tmpfs at /dev/shm")
def test_under_a_mounted_mount_point_the_database_is_created(tmp_path, monkeypatch):
    fstab = tmp_path / "fstab"
    fstab.write_text("tmpfs /dev/shm tmpfs defaults 0 0\n")
    monkeypatch.setattr(schema, "FSTABS", (str(fstab),))
    data = f"/dev/shm/qlshadow-test-{os.getpid()}-{tmp_path.name}"
    try:
        db.open_database(config.load(environ={"QL_DATA_DIR": data, "QL_DB_URL": f"sqlite:///{data}/q.db",
                                              "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": ""}))
        assert os.path.exists(f"{data}/q.db")
    finally:
        subprocess.run(["rm", "-rf", data], check=True)


def test_serve_exits_75_with_one_line_and_creates_nothing(tmp_path, unmounted):
    data = tmp_path / "mnt" / "usb" / "qlshadow"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
    env.update(QL_DATA_DIR=str(data), QL_DB_URL=f"sqlite:///{data}/qlshadow.db",
               QL_HOST="127.0.0.1", QL_PORT="0", QL_SCHEDULER="node", QL_CRONTAB_INSTALL="")
    # The real `serve`, with only the fstab's path pointed at the test's own.
    code = ("import sys; from qlshadow import schema, cli; "
            f"schema.FSTABS = ({str(unmounted)!r},); sys.exit(cli.main(['serve']))")
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 75, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"qlshadow: {tmp_path}/mnt/usb is a mount point")
    assert not (data / "qlshadow.db").exists()
