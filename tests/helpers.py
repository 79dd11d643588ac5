"""Helpers the tests import (`from helpers import ...`); fixtures live in conftest.py.

PostgreSQL administration, the CLI and server in child processes (servers through
scripts/harness.py), plain HTTP, request bodies, row reads and the Shadow setting.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from harness import ROOT, STARTUP, Serve, clean_env, free_port, stop_process

from qlshadow.storage import db

__all__ = ["ROOT", "STARTUP", "Serve", "clean_env", "free_port", "stop_process"]

PG_ADMIN_DSN = os.environ.get("QL_TEST_PG_ADMIN", "host=127.0.0.1 port=5432 user=postgres dbname=postgres")
PG_URL_BASE = os.environ.get("QL_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/")
REQUIRE_PG = os.environ.get("QL_REQUIRE_POSTGRES") == "1"

BACKENDS = ["sqlite", "postgres"]


def _pg_admin(dbname: str | None = None):
    import psycopg2
    extra = {"dbname": dbname} if dbname else {}
    conn = psycopg2.connect(PG_ADMIN_DSN, connect_timeout=3, **extra)
    conn.autocommit = True
    return conn


def _pg_reachable() -> str | None:
    try:
        _pg_admin().close()
        return None
    except Exception as exc:  # driver missing or server down
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"PostgreSQL unreachable ({PG_ADMIN_DSN}): {reason}"


def _require_pg() -> None:
    problem = _pg_reachable()
    if problem:
        if REQUIRE_PG:
            pytest.fail(problem + " — QL_REQUIRE_POSTGRES=1 makes this a failure")
        pytest.skip(problem)


def _create_throwaway_database(cur, name: str) -> None:
    """CREATE DATABASE for a test; its commits do not wait for the disk.

    A test database never outlives a server crash, so flushing the WAL at every commit buys
    nothing; on a shared disk those flushes were most of a PostgreSQL test's time. What
    other sessions see is the same: a commit is visible as soon as it returns either way.
    """
    cur.execute(f'CREATE DATABASE "{name}"')
    cur.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')


def create_pg_database() -> tuple:
    """Create a uniquely named database; returns (url, name). The caller drops it."""
    _require_pg()
    name = f"qlshadow_test_{uuid.uuid4().hex[:12]}"
    conn = _pg_admin()
    with conn.cursor() as cur:
        _create_throwaway_database(cur, name)
    conn.close()
    return PG_URL_BASE + name, name


def drop_pg_database(name: str) -> None:
    conn = _pg_admin()
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    conn.close()


def empty_pg_database(name: str) -> None:
    """Bring a database back to empty: no connections, no tables, functions or sequences.

    A test may have dropped it on purpose (database-down tests); then it is made again.
    """
    admin = _pg_admin()
    try:
        with admin.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cur.fetchone() is None:
                _create_throwaway_database(cur, name)
                return
            # What DROP DATABASE ... WITH (FORCE) did: a connection left by the previous test
            # (a thread's kept connection, a child process) must not hold a lock on a table.
            cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
    finally:
        admin.close()
    conn = _pg_admin(name)
    try:
        with conn.cursor() as cur:
            cur.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    finally:
        conn.close()


class SessionDatabases:
    """This session's PostgreSQL databases by role ("main", "twin"), made on first use."""

    def __init__(self):
        self.names: dict = {}

    def fresh(self, role: str = "main") -> str:
        """The URL of the role's database, emptied for the calling test."""
        name = self.names.get(role)
        if name is None:
            _, name = create_pg_database()  # skips (or fails in CI) when unreachable
            self.names[role] = name
        else:
            empty_pg_database(name)
        return PG_URL_BASE + name

    def drop_all(self) -> None:
        for name in self.names.values():
            drop_pg_database(name)


# The backend matrix is for behaviour that involves the database. A test of what happens
# above it (HTTP framing, body parsing, path rules, the server process) still needs a
# database for the app to start, but a second backend would test nothing new.
ONE_BACKEND = pytest.mark.parametrize("backend", ["sqlite"])


# --- real servers -------------------------------------------------------------------------

def run_cli(env: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run `qlshadow ARGS` in a child process with exactly the QL_* settings in env."""
    result = subprocess.run([sys.executable, "-m", "qlshadow.cli", *args], env=clean_env(env),
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise AssertionError(f"qlshadow {' '.join(args)} failed: {result.stderr}")
    return result


class LiveServer(Serve):
    """`qlshadow serve` on a free loopback port (harness.Serve), stopped by its PID.

    Before starting, `qlshadow token system` creates the schema and a token (self.token).
    """

    def __init__(self, env: dict):
        full = clean_env({"QL_HOST": "127.0.0.1", "QL_PORT": "0", **env})
        run_cli(full, "token", "system")
        with open(os.path.join(full["QL_DATA_DIR"], "token.json")) as fh:
            self.token = json.load(fh)["value"]
        self.headers = {"Authorization": f"Bearer {self.token}"}
        super().__init__(env=full)
        self.start()
        self.url = f"http://127.0.0.1:{self.port}"


def http(method: str, url: str, body=None, headers=None, timeout=30):
    """A plain urllib request; returns (status, parsed JSON or raw bytes)."""
    import urllib.error
    import urllib.request
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


# --- request bodies and row inspection ----------------------------------------------------

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def fixture_body(name: str, **changes) -> dict:
    """The JSON body in tests/fixtures/NAME.json with top-level keys replaced by changes."""
    with open(os.path.join(FIXTURES, name + ".json"), encoding="utf-8") as fh:
        body = json.load(fh)
    body.update(changes)
    return body


def table_rows(model, order_by=None) -> list:
    """Every row of a model as dicts, ordered by id (or order_by), read from the database."""
    with db.database.connection_context():
        query = model.select().order_by(order_by if order_by is not None else model._meta.primary_key)
        return list(query.dicts())


def cli_env(settings) -> dict:
    """The QL_* environment that makes `qlshadow` use the same database and data dir."""
    return {"QL_DATA_DIR": settings.data_dir, "QL_DB_URL": settings.db_url,
            "QL_SCHEDULER": settings.scheduler, "QL_CRONTAB_INSTALL": "",
            "QL_CRONTAB_FILE": settings.crontab_file}


SHADOW_ON = {"QL3_SHADOW_ORIGINS": "scheduled_system"}
STATUS_PATH = "/open/crons/status"


def play(client, headers: dict, steps) -> list:
    """Send (method, path, body) steps; returns the raw bytes of each status callback answer."""
    answers = []
    for method, path, body in steps:
        response = client.open(path, method=method, json=body, headers=headers)
        assert response.status_code == 200, response.data
        if path == STATUS_PATH:
            answers.append(response.data)
    return answers


def legacy_rows() -> dict:
    """Crons and RunningInstances, without the columns that only hold the server's clock."""
    from qlshadow.storage.models import Cron, RunningInstance
    db.ensure_connection()
    crons = [{k: v for k, v in row.items() if k not in ("created_at", "updated_at")}
             for row in Cron.select().order_by(Cron.id).dicts()]
    instances = [dict(row, finished_at=row["finished_at"] is not None)
                 for row in RunningInstance.select().order_by(RunningInstance.id).dicts()]
    return {"crons": crons, "instances": instances}


