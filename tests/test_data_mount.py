"""Nothing is created under a configured mount point that is not mounted yet, neither the
data dir nor a file in it nor the database: `serve` and every command exit 75 with one line
instead of writing to the filesystem beneath (schema.check_mounted, asked by cli.common.load_settings)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from qlshadow import config
from qlshadow.storage import db, schema
from helpers import ROOT

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


@pytest.fixture
def unmounted(tmp_path):
    """An OpenWrt fstab whose mount point tmp/mnt/usb (an empty directory, as on a router)
    is not mounted."""
    (tmp_path / "mnt" / "usb").mkdir(parents=True)
    uci = tmp_path / "fstab"
    uci.write_text(UCI_FSTAB.format(target=tmp_path / "mnt" / "usb"))
    return uci


def qlshadow(fstab, data, db_url: str, *args: str) -> subprocess.CompletedProcess:
    """The real command line, with only the fstab's path pointed at the test's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
    env.update(QL_DATA_DIR=str(data), QL_DB_URL=db_url, QL_HOST="127.0.0.1", QL_PORT="0",
               QL_SCHEDULER="node", QL_CRONTAB_INSTALL="")
    code = ("import sys; from qlshadow import cli; from qlshadow.storage.schema import mounts; "
            f"mounts.FSTABS = ({str(fstab)!r},); sys.exit(cli.main({list(args)!r}))")
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def _refusal(result, tmp_path, fstab, what: str) -> str:
    """The one line a refused command printed, checked for its exit status 75."""
    assert result.returncode == 75, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"qlshadow: {tmp_path}/mnt/usb is a mount point in {fstab} "
                               f"that is not mounted: not creating {what} ")
    assert lines[0].endswith(" beneath it; start again once it is mounted")
    return lines[0]


@pytest.mark.parametrize("command", [["serve"], ["db", "init"], ["token", "system"],
                                     ["token", "runner"], ["crontab", "--remove"]])
def test_no_command_creates_the_data_dir_or_anything_in_it_under_an_unmounted_mount_point(
        tmp_path, unmounted, db_url, command):
    data = tmp_path / "mnt" / "usb" / "qlshadow"
    result = qlshadow(unmounted, data, db_url, *command)
    line = _refusal(result, tmp_path, unmounted, "the data directory")
    assert f" the data directory {data} beneath it" in line
    assert os.listdir(tmp_path / "mnt" / "usb") == []


def test_a_new_database_in_a_data_dir_already_under_it_is_refused(tmp_path, unmounted):
    data = tmp_path / "mnt" / "usb" / "qlshadow"
    data.mkdir()  # made on purpose, e.g. before the fstab entry existed
    path = data / "qlshadow.db"
    result = qlshadow(unmounted, data, f"sqlite:///{path}", "db", "init")
    assert f" the database {path} beneath it" in _refusal(result, tmp_path, unmounted,
                                                            "the database")
    assert os.listdir(data) == []


def test_an_existing_database_under_it_is_opened(tmp_path, unmounted):
    path = tmp_path / "mnt" / "usb" / "qlshadow" / "qlshadow.db"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")  # made on purpose, e.g. before the fstab entry existed
    result = qlshadow(unmounted, path.parent, f"sqlite:///{path}", "db", "init")
    assert result.returncode == 0 and result.stdout.startswith("database ready"), result.stderr
    db.open_database(config.load(environ={"QL_DATA_DIR": str(path.parent),
                                          "QL_DB_URL": f"sqlite:///{path}"}), create=False)
    with db.database.connection_context():
        assert "crons" in db.database.get_tables()


@pytest.mark.parametrize("backend", ["postgres"])
def test_postgresql_with_a_data_dir_already_under_it_is_served(tmp_path, unmounted, db_url):
    data = tmp_path / "mnt" / "usb" / "qlshadow"
    data.mkdir()  # the data dir exists: its files are written there as usual
    result = qlshadow(unmounted, data, db_url, "token", "system")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(data / "token.json")


def test_an_fstab_that_names_no_mount_point_above_the_data_dir_refuses_nothing(tmp_path):
    fstab = tmp_path / "fstab"
    fstab.write_text(UCI_FSTAB.format(target=tmp_path / "elsewhere"))
    data = tmp_path / "data"
    result = qlshadow(fstab, data, f"sqlite:///{data}/qlshadow.db", "db", "init")
    assert result.returncode == 0, result.stderr
    assert (data / "qlshadow.db").exists()


@pytest.mark.skipif(not os.path.ismount("/dev/shm"), reason="no tmpfs at /dev/shm")
def test_under_a_mounted_mount_point_the_database_is_created(tmp_path):
    fstab = tmp_path / "fstab"
    fstab.write_text("tmpfs /dev/shm tmpfs defaults 0 0\n")
    data = f"/dev/shm/qlshadow-test-{os.getpid()}-{tmp_path.name}"
    try:
        result = qlshadow(fstab, data, f"sqlite:///{data}/q.db", "db", "init")
        assert result.returncode == 0, result.stderr
        assert os.path.exists(f"{data}/q.db")
    finally:
        subprocess.run(["rm", "-rf", data], check=True)
