"""Schema steps 3 to 8 on a full partition (app/storage/schema/steps.py): the step that cannot
commit changes nothing, `qlshadow db init` says so in one line, the database stays intact at
the version before it (the steps before it that fit stay done, whole), and the next start
with room finishes the upgrade with every row kept.
SQLite only: a full disk is a filesystem fault of the router's SQLite file, while a PostgreSQL
server's disk is the database administrator's (see docs/RELIABILITY.md).

Steps 1 and 2 on a full partition are in test_disk_full.py and test_overlay_upgrade.py.
"""
from __future__ import annotations

import os

import pytest

from invariants import Inspector

from .helpers import db_init, fill_disk

pytestmark = [pytest.mark.faults, pytest.mark.parametrize("backend", ["sqlite"])]

CRONS = 40
RUNS = 400
START = 1_764_460_800
# Left free once the partition is full: the WAL index (-shm, 32 KiB) that opening the
# database needs, and not the WAL frames (4 KiB pages) of any step. Measured: with 32 to
# 40 KiB each step fails; with 28 opening fails; with 44 step 3 fits.
ROOM = 36 * 1024




def _database_before(db_url: str, version: int) -> None:
    """A database at `version` as the releases before made it, with rows in the tables of
    version 1: crons, an instance, an app and its token, Runs and a shadow failure."""
    from qlshadow.storage import db
    from qlshadow.storage.models import App, Cron, RunningInstance, ShadowFailure, Token
    from old_schema import database_at, insert_runs, old_run
    database = database_at(db_url, version)
    with database.connection_context():
        with database.atomic():
            crons = [Cron.insert(name=f"job{n}", command=f"task job{n}.sh",
                                 schedule="*/5 * * * *", status=n % 2, pid=1000 + n,
                                 log_path=f"job{n}.log", created_at=1, updated_at=2).execute()
                     for n in range(CRONS)]
            RunningInstance.insert(cron=crons[0], pid=1000, log_path="job0.log",
                                   started_at=START).execute()
            app = App.insert(name="legacy-client", client_id="c1", client_secret_hash="0" * 64,
                             scopes="crons", created_at=5).execute()
            Token.insert(token_hash="1" * 64, app=app, expiration=2**40).execute()
            ShadowFailure.insert(at=START, reason="replay_drift", cron_id=crons[1],
                                 detail="x").execute()
        rows = [old_run(crons[n % CRONS], START + 60 * (n // CRONS), n,
                        "running" if n >= RUNS - CRONS else "exited") for n in range(RUNS)]
        for at in range(0, RUNS, 200):
            with database.atomic():
                insert_runs(database, rows[at:at + 200])
        # An empty WAL: the step's first frames must grow it on the full partition.
        database.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    db.discard_connection()


def _schema(conn) -> list:
    """Every table, index and column as sqlite_master holds them."""
    return sorted(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall(),
                  key=repr)


def _version(conn) -> int:
    return conn.execute('SELECT "version" FROM "schema_version"').fetchone()[0]


def _every_row(conn, columns: dict | None = None) -> dict:
    """Every row of every table (of the given tables' given columns), sorted."""
    if columns is None:
        columns = {table: [c[1] for c in conn.execute(f'PRAGMA table_info("{table}")')]
                   for (table,) in conn.execute(
                       "SELECT name FROM sqlite_master WHERE type = 'table'")}
    return {table: sorted(conn.execute(
                f'SELECT {", ".join(f"{chr(34)}{c}{chr(34)}" for c in names)} FROM "{table}"'
            ).fetchall(), key=repr)
            for table, names in columns.items() if table != "schema_version"}


def _env(data_dir: str, db_url: str, tmp_path) -> dict:
    return {"QL_DATA_DIR": data_dir, "QL_DB_URL": db_url, "QL_SCHEDULER": "node",
            "QL_CRONTAB_INSTALL": "", "QL_CRONTAB_FILE": str(tmp_path / "crontab.list")}


def _read(db_url: str) -> tuple:
    """(version, schema, every row, each table's columns) of the database at db_url."""
    with Inspector(db_url) as inspector:
        conn = inspector.conn
        rows = _every_row(conn)
        columns = {t: [c[1] for c in conn.execute(f'PRAGMA table_info("{t}")')] for t in rows}
        return _version(conn), _schema(conn), rows, columns


def _check_finished(db_url: str, rows_before: dict, columns: dict) -> None:
    """The database is at the latest version with every row from before, field for field."""
    from qlshadow.storage import schema
    with Inspector(db_url) as inspector:
        assert inspector.integrity() == "ok"
        assert _version(inspector.conn) == schema.LATEST
        after = _every_row(inspector.conn, columns)
        for table, rows in rows_before.items():
            assert set(rows) <= set(after[table]), table
        # db init adds only the system app and this boot's record (host_boots, version 5).
        assert {t: r for t, r in after.items() if t not in ("apps", "host_boots")} == \
            {t: r for t, r in rows_before.items() if t not in ("apps", "host_boots")}
        assert len(after["apps"]) == len(rows_before["apps"]) + 1
        # The fleet step (8) ran too: the crons from before run on every host.
        hosts = {r[0] for r in inspector.conn.execute('SELECT "hosts" FROM "crons"')}
        assert hosts == {'["*"]'}


@pytest.mark.parametrize("step", range(3, 9))
def test_a_step_on_a_full_partition_changes_nothing_and_finishes_once_there_is_room(
        small_tmpfs, tmp_path, backend, step, figures):
    from qlshadow.storage import schema
    assert schema.LATEST == 8
    path = f"{small_tmpfs}/qlshadow.db"
    db_url = f"sqlite:///{path}"
    _database_before(db_url, step - 1)
    version, schema_before, rows_before, columns = _read(db_url)
    assert version == step - 1
    assert len(rows_before["crons"]) == CRONS and len(rows_before["shadow_runs"]) == RUNS
    env = _env(small_tmpfs, db_url, tmp_path)
    filler, filled = fill_disk(small_tmpfs)
    os.truncate(filler, filled - ROOM)  # room to open the database, none for the step

    full = db_init(env)

    # The step did fail (else this proves nothing), in one line that names it and the cause.
    assert full.returncode == 1, (full.returncode, full.stderr)
    assert "Traceback" not in full.stderr
    lines = full.stderr.strip().splitlines()
    assert len(lines) == 1, full.stderr
    assert lines[0].endswith(f"cannot {schema.STEPS[step - 1][0]}: disk full; "
                             "the database is unchanged"), full.stderr
    with Inspector(db_url) as inspector:
        assert inspector.integrity() == "ok"
    assert _read(db_url)[:3] == (step - 1, schema_before, rows_before)  # nothing half-done

    os.unlink(filler)
    room = db_init(env)

    assert room.returncode == 0, room.stderr
    assert "Traceback" not in room.stderr
    _check_finished(db_url, rows_before, columns)
    figures(step=step, room_bytes=ROOM, runs=RUNS, crons=CRONS,
            db_bytes=os.path.getsize(path), full_error=lines[0])


# Rooms (KiB) that let some steps from version 2 commit and not all (measured on a 4 MiB
# tmpfs: 56 stops after step 3, 100 after 5, 144 after 7).
@pytest.mark.parametrize("room", [56, 100, 144])
def test_the_steps_that_fit_stay_done_whole_and_the_next_start_does_the_rest(
        small_tmpfs, tmp_path, backend, room, figures):
    from qlshadow.storage import db, schema
    from old_schema import database_at
    db_url = f"sqlite:///{small_tmpfs}/qlshadow.db"
    _database_before(db_url, 2)
    _, _, rows_before, columns = _read(db_url)
    env = _env(small_tmpfs, db_url, tmp_path)
    filler, filled = fill_disk(small_tmpfs)
    os.truncate(filler, filled - room * 1024)

    full = db_init(env)

    assert full.returncode == 1, (full.returncode, full.stderr)
    assert "Traceback" not in full.stderr
    with Inspector(db_url) as inspector:
        assert inspector.integrity() == "ok"
    version, schema_stopped, rows, _ = _read(db_url)
    assert 2 < version < schema.LATEST  # part of the way: the case this test is for
    # A line for each step done and one for the step that did not fit, nothing else.
    assert full.stderr.strip().splitlines() == \
        [f"schema upgraded to version {v}" for v in range(3, version + 1)] + \
        [f"qlshadow: cannot {schema.STEPS[version][0]}: disk full; the database stays at "
         f"schema version {version}"], full.stderr
    # Whole steps: the schema is exactly what the steps up to that version make, and the
    # rows are those from before.
    reference = f"sqlite:///{tmp_path}/reference/qlshadow.db"
    database_at(reference, version)
    db.discard_connection()
    assert schema_stopped == _read(reference)[1]
    assert _every_row_of(rows, columns) == rows_before

    os.unlink(filler)
    room_run = db_init(env)

    assert room_run.returncode == 0, room_run.stderr
    assert "Traceback" not in room_run.stderr
    _check_finished(db_url, rows_before, columns)
    figures(room_bytes=room * 1024, stopped_at_version=version)


def _every_row_of(rows: dict, columns: dict) -> dict:
    """Rows read with every column, cut to the columns a table had before (its first ones:
    a step appends columns)."""
    return {t: sorted((r[:len(columns[t])] for r in rows[t]), key=repr) for t in columns}


def test_a_partition_without_room_for_the_shared_memory_file_is_called_full(
        small_tmpfs, tmp_path, backend):
    # SQLite reports the -shm file it cannot make as a "disk I/O error": the line says why.
    db_url = f"sqlite:///{small_tmpfs}/qlshadow.db"
    _database_before(db_url, 7)
    env = _env(small_tmpfs, db_url, tmp_path)
    filler, filled = fill_disk(small_tmpfs)
    os.truncate(filler, filled - 16 * 1024)

    full = db_init(env)

    assert full.returncode == 1, full.stderr
    (line,) = full.stderr.strip().splitlines()
    assert f"disk full: {small_tmpfs} has no room for SQLite's shared-memory file" in line, line
    os.unlink(filler)
    assert db_init(env).returncode == 0


def test_an_upgraded_database_without_room_for_the_system_app_is_left_unchanged(
        small_tmpfs, tmp_path, backend):
    # Every step is done (a database at the latest version from a release with no system
    # app): what db init still writes is that app, and the line says so.
    from qlshadow.storage import schema
    db_url = f"sqlite:///{small_tmpfs}/qlshadow.db"
    _database_before(db_url, schema.LATEST)
    before = _read(db_url)[:3]
    env = _env(small_tmpfs, db_url, tmp_path)
    filler, filled = fill_disk(small_tmpfs)
    os.truncate(filler, filled - ROOM)

    full = db_init(env)

    assert full.returncode == 1, full.stderr
    assert "Traceback" not in full.stderr
    *others, line = full.stderr.strip().splitlines()
    assert line == ("qlshadow: cannot create the system app: disk full; "
                    "the database is unchanged"), full.stderr
    # The only other line says this boot could not be recorded either (storage/reboot.py).
    assert all("cannot record this boot" in other for other in others), full.stderr
    assert _read(db_url)[:3] == before
    os.unlink(filler)
    room = db_init(env)
    assert room.returncode == 0, room.stderr
    with Inspector(db_url) as inspector:
        assert inspector.conn.execute(
            "SELECT count(*) FROM apps WHERE name = 'system'").fetchone()[0] == 1
