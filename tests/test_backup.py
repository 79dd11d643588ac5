"""`qlshadow backup` and the snapshot it keeps (app/storage/backup.py): a consistent one-file copy
of the SQLite database taken with SQLite's online backup API, the list of files a
configuration backup holds, and the restore that opening a missing database does. On
PostgreSQL there is nothing to snapshot."""
from __future__ import annotations

import os
import sqlite3
import time

import pytest

from qlshadow.storage import backup, db
from qlshadow import config
from helpers import run_cli


def cli_env(settings) -> dict:
    return {"QL_DATA_DIR": settings.data_dir, "QL_DB_URL": settings.db_url,
            "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": ""}


def token_rows(path: str) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT count(*) FROM tokens").fetchone()[0]


@pytest.fixture
def made(app, settings):
    """The app's database with a system token written (a row and token.json)."""
    run_cli(cli_env(settings), "token", "system")
    return settings


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_snapshot_is_one_private_file_holding_every_committed_row(made):
    live = config.sqlite_file(made.db_url)

    result = run_cli(cli_env(made), "backup")

    path = result.stdout.strip()
    assert path == live + ".snapshot"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert not os.path.exists(path + "-wal") and not os.path.exists(path + ".tmp")
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert token_rows(path) == token_rows(live) > 0


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_snapshot_goes_to_the_path_given(made, tmp_path):

    result = run_cli(cli_env(made), "backup", str(tmp_path / "copy.db"))

    assert result.stdout.strip() == str(tmp_path / "copy.db")
    assert token_rows(str(tmp_path / "copy.db")) > 0


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_on_postgresql_there_is_nothing_to_snapshot(made):
    before = sorted(os.listdir(made.data_dir))

    result = run_cli(cli_env(made), "backup")

    assert result.returncode == 0
    assert result.stdout == ""
    assert result.stderr == ("qlshadow: nothing to snapshot: the database is PostgreSQL "
                             "(QL_DB_URL), which keeps it\n")
    assert sorted(os.listdir(made.data_dir)) == before


def test_the_keep_list_swaps_the_live_database_for_its_snapshot(made, backend, tmp_path):
    data = os.path.abspath(made.data_dir)
    live = config.sqlite_file(made.db_url)
    listed = tmp_path / "conffiles"
    # What sysupgrade found: a file of its own, and (from a sysupgrade.conf naming the
    # data dir) the live database and its WAL.
    listed.write_text("/etc/config/network\n" + (f"{live}\n{live}-wal\n" if live else ""))

    run_cli(cli_env(made), "backup", "--keep-list", str(listed))

    kept = listed.read_text().splitlines()
    assert "/etc/config/network" in kept
    assert os.path.join(data, "token.json") in kept
    assert os.path.join(data, "prune.reserve") not in kept
    assert not [path for path in kept if path.endswith(("qlshadow.db", "-wal", "-shm"))]
    assert (live is not None and live + ".snapshot" in kept) == (backend == "sqlite")


# --- restore when the database is opened ---------------------------------------------------

def sqlite_settings(tmp_path) -> config.Settings:
    return config.load(environ={"QL_DATA_DIR": str(tmp_path / "data"), "QL_SCHEDULER": "node",
                                "QL_CRONTAB_INSTALL": ""})


def test_a_missing_database_comes_back_from_its_snapshot_when_opened(tmp_path, capfd):
    settings = sqlite_settings(tmp_path)
    db.open_database(settings)
    run_cli(cli_env(settings), "token", "system")
    live = config.sqlite_file(settings.db_url)
    backup.snapshot(settings)
    rows = token_rows(live)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(live + suffix):
            os.unlink(live + suffix)
    with open(live + "-wal", "wb") as fh:  # another database's WAL must not be replayed
        fh.write(b"\0" * 32)
    capfd.readouterr()

    db.open_database(settings)
    db.database.close()

    assert capfd.readouterr().err == (f"qlshadow: restored the database {live} from its "
                                      "snapshot (taken for a backup or upgrade)\n")
    assert not os.path.exists(live + ".snapshot")
    assert token_rows(live) == rows


def test_an_old_snapshot_beside_a_live_database_is_removed_and_a_fresh_one_kept(tmp_path, capfd):
    settings = sqlite_settings(tmp_path)
    db.open_database(settings)
    path = backup.snapshot(settings)
    capfd.readouterr()

    db.open_database(settings)
    kept = os.path.exists(path)
    old = time.time() - backup.STALE_AFTER - 1
    os.utime(path, (old, old))
    db.open_database(settings)
    db.database.close()

    assert kept
    assert not os.path.exists(path)
    assert capfd.readouterr().err == (f"qlshadow: removed the database snapshot {path}: "
                                      "the database beside it is newer\n")


def test_a_read_only_command_restores_nothing(tmp_path):
    settings = sqlite_settings(tmp_path)
    db.open_database(settings)
    live = config.sqlite_file(settings.db_url)
    backup.snapshot(settings)
    db.database.close()
    os.unlink(live)

    result = run_cli(cli_env(settings), "runs", check=False)

    assert result.returncode == 1
    assert os.path.exists(live + ".snapshot") and not os.path.exists(live)
