"""GET /health (CONTRACT.md §7): no token, the service's shape, 503 when the database is really
unreachable, and recovery without a restart."""
from __future__ import annotations

import os
import shutil
from urllib.parse import urlsplit

import pytest

from qlshadow import __version__
from qlshadow.storage import db
from helpers import _create_throwaway_database, _pg_admin, drop_pg_database


def test_health_answers_ok_with_version_scheduler_and_origins(client):
    response = client.get("/health")

    assert response.status_code == 200
    data = response.get_json()["data"]
    assert {k: data[k] for k in ("status", "db", "version", "scheduler", "shadow_origins")} == {
        "status": "ok", "db": "ok", "version": __version__, "scheduler": "node",
        "shadow_origins": []}


@pytest.mark.parametrize("shadow_env", [{"QL3_SHADOW_ORIGINS": "scheduled_system, manual",
                                         "QL_SCHEDULER": "system"}])
def test_health_names_the_configured_scheduler_and_shadow_origins(client):
    data = client.get("/health").get_json()["data"]

    assert (data["scheduler"], data["shadow_origins"]) == ("system", ["manual", "scheduled_system"])


def _sqlite_path(db_url: str) -> str:
    return db_url[len("sqlite:///"):]


def _take_sqlite_away(path: str) -> str:
    """Move the database aside and put a directory in its place; returns where it went."""
    aside = path + ".aside"
    os.mkdir(aside)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            shutil.move(path + suffix, os.path.join(aside, "db" + suffix))
    os.mkdir(path)
    return aside


def _bring_sqlite_back(path: str, aside: str) -> None:
    os.rmdir(path)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(os.path.join(aside, "db" + suffix)):
            shutil.move(os.path.join(aside, "db" + suffix), path + suffix)


def assert_down(response) -> None:
    body = response.get_json()
    assert response.status_code == 503
    assert response.mimetype == "application/json"
    assert body["code"] == 503 and body["message"]
    assert body["data"]["db"] != "ok"


@pytest.mark.parametrize("backend", ["sqlite"])
def test_health_is_503_when_the_sqlite_file_is_gone(client, db_url):
    assert client.get("/health").status_code == 200
    db.discard_connection()
    _take_sqlite_away(_sqlite_path(db_url))

    assert_down(client.get("/health"))


@pytest.mark.parametrize("backend", ["sqlite"])
def test_health_recovers_when_the_sqlite_file_is_back(client, db_url):
    db.discard_connection()
    aside = _take_sqlite_away(_sqlite_path(db_url))
    assert client.get("/health").status_code == 503

    _bring_sqlite_back(_sqlite_path(db_url), aside)

    assert client.get("/health").status_code == 200


def _pg_name(db_url: str) -> str:
    return urlsplit(db_url).path.lstrip("/")


@pytest.mark.parametrize("backend", ["postgres"])
def test_health_is_503_when_the_postgres_database_is_dropped(client, db_url):
    assert client.get("/health").status_code == 200  # the connection is open and kept

    drop_pg_database(_pg_name(db_url))

    assert_down(client.get("/health"))
    assert_down(client.get("/health"))  # the reconnect fails too


@pytest.mark.parametrize("backend", ["postgres"])
def test_health_recovers_without_restart_when_postgres_is_back(client, db_url):
    assert client.get("/health").status_code == 200
    drop_pg_database(_pg_name(db_url))
    assert client.get("/health").status_code == 503

    conn = _pg_admin()
    with conn.cursor() as cur:
        _create_throwaway_database(cur, _pg_name(db_url))
    conn.close()

    assert client.get("/health").status_code == 200


@pytest.mark.parametrize("backend", ["postgres"])
def test_the_first_callback_after_postgres_closed_the_connection_succeeds(client, auth, make_cron, db_url):
    cron = make_cron()
    assert client.get("/health").status_code == 200  # this thread's connection is open and kept
    conn = _pg_admin()
    with conn.cursor() as cur:  # what a PostgreSQL restart does to every open connection
        cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                    "AND pid <> pg_backend_pid()", (_pg_name(db_url),))
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (_pg_name(db_url),))
        while cur.fetchone()[0]:  # wait until the server has really closed it
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (_pg_name(db_url),))
    conn.close()

    response = client.put("/open/crons/status", headers=auth,
                          json={"ids": [str(cron["id"])], "status": "0", "pid": "7"})

    assert (response.status_code, response.get_json()) == (200, {"code": 200})


def test_health_reports_the_last_write_and_the_storage(client):
    data = client.get("/health").get_json()["data"]

    assert data["last_write"] == {"ok": True, "cause": None, "since": None, "failures": 0}
    assert set(data["storage"]) == {"db_bytes", "wal_bytes", "free_bytes", "synchronous",
                                    "used_bytes", "budget_bytes", "log_bytes"}
    assert data["storage"]["free_bytes"] > 0
    # The SQLite level a power cut depends on; PostgreSQL has none of ours.
    assert data["storage"]["synchronous"] == ("full" if data["storage"]["db_bytes"] else None)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_on_sqlite_health_gives_the_database_and_wal_sizes(client, db_url):
    storage = client.get("/health").get_json()["data"]["storage"]
    path = _sqlite_path(db_url)

    assert storage["db_bytes"] == os.path.getsize(path)
    assert storage["wal_bytes"] == (os.path.getsize(path + "-wal")
                                    if os.path.exists(path + "-wal") else 0)


def test_health_is_503_naming_the_cause_while_writes_fail(app, client):
    full = OSError(28, "No space left on device")

    writes(app).note_failed(full)
    response = client.get("/health")

    assert response.status_code == 503
    assert response.get_json()["message"] == "Writes are failing: disk full."
    assert response.get_json()["data"]["last_write"]["cause"] == "disk full"


def test_a_successful_write_ends_the_failure(app, client, auth, make_cron):
    cron = make_cron()
    writes(app).note_failed(RuntimeError("database is locked"))
    assert client.get("/health").status_code == 503

    assert client.put("/open/crons/status", headers=auth,
                      json={"ids": [cron["id"]], "status": 0, "pid": 1}).status_code == 200

    assert client.get("/health").status_code == 200


def test_a_failure_incident_is_logged_once(app, client, caplog):
    for _ in range(5):
        writes(app).note_failed(OSError(28, "No space left on device"))

    lines = [r.getMessage() for r in caplog.records if "writes are failing" in r.getMessage()]
    assert lines == ["writes are failing: disk full; writes are refused until one succeeds"]
    assert client.get("/health").get_json()["data"]["last_write"]["failures"] == 5


def writes(app):
    """The app's record of whether writes work (its Runtime's)."""
    from qlshadow.core.runtime import KEY
    return app.extensions[KEY].writes
