"""Shared fixtures: a real SQLite file and a real PostgreSQL database.

Every database test runs on both backends via the `backend` parameter. SQLite gets a new
file per test. PostgreSQL gets one database per session (made on first use), emptied before
each test by dropping and recreating its schema: creating and dropping a database per test
was most of the suite's wall time. A test still sees no tables, and sequences start at 1.
PostgreSQL tests skip with a reason when the server is unreachable, except when
QL_REQUIRE_POSTGRES=1 (set by .ci/run), where they fail.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest

from qlshadow import config, db
from qlshadow.views import create_app

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


@pytest.fixture(scope="session")
def pg_databases():
    """One PostgreSQL database per role for the whole session; dropped at its end."""
    databases = SessionDatabases()
    yield databases
    databases.drop_all()


# The backend matrix is for behaviour that involves the database. A test of what happens
# above it (HTTP framing, body parsing, path rules, the server process) still needs a
# database for the app to start, but a second backend would test nothing new.
ONE_BACKEND = pytest.mark.parametrize("backend", ["sqlite"])


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def db_url(backend, tmp_path, pg_databases):
    """An empty database URL on the current backend: a new SQLite file, or the session's
    PostgreSQL database emptied for this test."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path}/qlshadow.db"
    return pg_databases.fresh()


@pytest.fixture
def make_settings(tmp_path, db_url):
    """Settings from an environment dict, on the current backend and a temp data dir."""
    def make(**env):
        base = {"QL_DATA_DIR": str(tmp_path / "data"), "QL_DB_URL": db_url,
                "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": ""}
        base.update({k: str(v) for k, v in env.items()})
        return config.load(environ=base)
    return make


@pytest.fixture
def shadow_env() -> dict:
    """Extra environment for the app fixture; tests override via indirect parametrize."""
    return {}


@pytest.fixture
def app(make_settings, shadow_env):
    application = create_app(make_settings(**shadow_env))
    yield application
    db.discard_connection()


@pytest.fixture
def settings(app):
    """The settings the app fixture was built with."""
    return app.extensions["qlshadow"]


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def token(app) -> str:
    """A valid system token (via the same code path as `qlshadow token system`)."""
    from qlshadow.auth import system_token
    settings = app.extensions["qlshadow"]
    with db.database.connection_context(), db.write_transaction():
        return system_token(settings.token_file)["value"]


@pytest.fixture
def auth(token) -> dict:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def make_cron(client, auth):
    """Create a cron through the API; returns its JSON."""
    def make(name="backup", command="task backup.sh", schedule="*/5 * * * *", **extra):
        body = {"name": name, "command": command, "schedule": schedule, **extra}
        response = client.post("/open/crons", json=body, headers=auth)
        assert response.status_code == 200, response.get_json()
        return response.get_json()["data"]
    return make


# --- real servers -------------------------------------------------------------------------

STARTUP = re.compile(rb"qlshadow serving http://[^:]+:(\d+) ")


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cli(env: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run `qlshadow ARGS` in a child process with exactly the QL_* settings in env."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
    full.update(env)
    result = subprocess.run([sys.executable, "-m", "qlshadow.cli", *args], env=full, cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise AssertionError(f"qlshadow {' '.join(args)} failed: {result.stderr}")
    return result


class LiveServer:
    """`qlshadow serve` in its own process on a free loopback port; stopped by its PID.

    Before starting, `qlshadow token system` creates the schema and a token (self.token).
    """

    def __init__(self, env: dict):
        full = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
        full.update({"QL_HOST": "127.0.0.1", "QL_PORT": "0"}, **env)
        run_cli(full, "token", "system")
        with open(os.path.join(full["QL_DATA_DIR"], "token.json")) as fh:
            self.token = json.load(fh)["value"]
        self.headers = {"Authorization": f"Bearer {self.token}"}
        # Output goes to a file, not a pipe: a pipe nobody drains would block the server.
        self.log_path = os.path.join(full["QL_DATA_DIR"], f"server-{uuid.uuid4().hex[:8]}.log")
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen([sys.executable, "-m", "qlshadow.cli", "serve"], env=full,
                                        stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as fh:
                match = STARTUP.search(fh.read())
            if match:
                self.port = int(match.group(1))
                self.url = f"http://127.0.0.1:{self.port}"
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"server did not start: {self.output()}")

    def output(self) -> str:
        with open(self.log_path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")

    def stop(self) -> None:
        stop_process(self.process)
        self._log.close()


def stop_process(process: subprocess.Popen) -> None:
    """Stop a process this test started, by its PID: SIGTERM, then SIGKILL after 10 s."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@pytest.fixture
def live_server(make_settings, tmp_path):
    """Start servers sharing this test's database; all are stopped at teardown."""
    servers = []

    def start(**env):
        settings = make_settings(**env)
        base = {"QL_DATA_DIR": settings.data_dir, "QL_DB_URL": settings.db_url,
                "QL_SCHEDULER": settings.scheduler, "QL_CRONTAB_INSTALL": "",
                "QL_CRONTAB_FILE": settings.crontab_file}
        base.update({k: str(v) for k, v in env.items()})
        server = LiveServer(base)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


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


# --- Shadow: the same requests on a Shadow-off twin -----------------------------------------

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
    from qlshadow.models import Cron, RunningInstance
    db.ensure_connection()
    crons = [{k: v for k, v in row.items() if k not in ("created_at", "updated_at")}
             for row in Cron.select().order_by(Cron.id).dicts()]
    instances = [dict(row, finished_at=row["finished_at"] is not None)
                 for row in RunningInstance.select().order_by(RunningInstance.id).dicts()]
    return {"crons": crons, "instances": instances}


@pytest.fixture
def legacy_twin(app, backend, tmp_path, pg_databases):
    """twin(steps) plays steps on a Shadow-off app over a second empty database.

    Returns (callback answers, legacy_rows()); the test's own database is bound again after.
    """
    from qlshadow.auth import system_token
    played = []

    def twin(steps):
        main = db.database.obj
        played.append(None)
        if backend == "sqlite":
            url = f"sqlite:///{tmp_path}/twin-{len(played)}.db"
        else:
            url = pg_databases.fresh("twin")
        settings = config.load(environ={
            "QL_DATA_DIR": str(tmp_path / f"twin-{len(played)}"), "QL_DB_URL": url,
            "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": ""})
        try:
            twin_app = create_app(settings)
            with db.database.connection_context(), db.write_transaction():
                value = system_token(settings.token_file)["value"]
            answers = play(twin_app.test_client(), {"Authorization": f"Bearer {value}"}, steps)
            return answers, legacy_rows()
        finally:
            db.discard_connection()
            db.bind(main)

    return twin


@pytest.fixture
def box_zone(monkeypatch):
    """Set the box's local time zone for this test (a TZ value, e.g. "CST-8": a POSIX
    string needs no tzdata); the host's own zone is back after it."""
    def set_zone(tz: str) -> None:
        monkeypatch.setenv("TZ", tz)
        time.tzset()
    yield set_zone
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def utc_box(box_zone):
    """The box keeps UTC as its local time (histories laid out in UTC minutes)."""
    box_zone("UTC")


# Each test's private crontab spool has a lock file of its own (crontab.lock_path), which
# the product never removes (removing a lock file others may hold is racy). The run removes
# the ones it made, once every test (and every xdist worker) is done.
_LOCK_GLOB = "qlshadow-crontab-*.lock"
_LOCKS_BEFORE = pytest.StashKey[set]()


def _crontab_lock_files() -> set:
    import glob as _glob
    from qlshadow.crontab import LOCK_DIRS
    return {path for directory in LOCK_DIRS for path in _glob.glob(os.path.join(directory, _LOCK_GLOB))}


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):
        session.config.stash[_LOCKS_BEFORE] = _crontab_lock_files()


def pytest_sessionfinish(session, exitstatus):
    before = session.config.stash.get(_LOCKS_BEFORE, None)
    if before is None:  # an xdist worker: the controller cleans up after all of them
        return
    for path in _crontab_lock_files() - before:
        try:
            os.unlink(path)
        except OSError:
            pass
