"""Shared fixtures (only fixtures: the helpers tests import are in tests/helpers.py): a real
SQLite file and a real PostgreSQL database.

Every database test runs on both backends via the `backend` parameter. SQLite gets a new
file per test. PostgreSQL gets one database per session (made on first use), emptied before
each test by dropping and recreating its schema: creating and dropping a database per test
was most of the suite's wall time. A test still sees no tables, and sequences start at 1.
PostgreSQL tests skip with a reason when the server is unreachable, except when
QL_REQUIRE_POSTGRES=1 (set by .ci/run), where they fail.
"""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import time

# With PYTHONDONTWRITEBYTECODE set (some hosts set it to keep checkouts free of __pycache__),
# every child Python of the run (the thousands of CLI and serve processes, the xdist workers)
# compiled qlshadow and the test modules from source again: about 40 % of a CLI start's CPU.
# Byte code goes to a cache of the run's own outside the checkout instead (removed when the
# run ends); set before any of ours is imported or any worker or child is started.
if sys.dont_write_bytecode:
    if "PYTHONPYCACHEPREFIX" not in os.environ:
        os.environ["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="qlshadow-pycache-")
        # At exit: pytest itself still imports (and caches) modules after the session ends.
        atexit.register(shutil.rmtree, os.environ["PYTHONPYCACHEPREFIX"], True)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]
    sys.dont_write_bytecode = False

import pytest
from helpers import BACKENDS, SHADOW_ON, LiveServer, SessionDatabases, legacy_rows, play
from receivers import PROXY_VARIABLES, Receiver

from qlshadow import config
from qlshadow.storage import db
from qlshadow.web.views import create_app


@pytest.fixture(scope="session")
def pg_databases():
    """One PostgreSQL database per role for the whole session; dropped at its end."""
    databases = SessionDatabases()
    yield databases
    databases.drop_all()


@pytest.fixture(scope="session", autouse=True)
def package_build_cache(tmp_path_factory):
    """One store of compacted sources (scripts/pkgbuild/stage.py) for the run's package
    builds, in-process and child: the first staging compacts, later ones read it. Shared by
    the xdist workers (their temp dirs have one parent per run), so it lasts one run."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    os.environ["QL_PKGBUILD_CACHE"] = str(shared / "pkgbuild-cache")
    yield
    os.environ.pop("QL_PKGBUILD_CACHE", None)


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
def shadow_env(request) -> dict:
    """Extra environment for the app fixture: a parametrized value (direct or indirect),
    else Shadow on under the `shadow_on` marker (e.g. a module's pytestmark), else none."""
    if hasattr(request, "param"):
        return request.param
    return dict(SHADOW_ON) if request.node.get_closest_marker("shadow_on") else {}


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
    from qlshadow.core.auth import system_token
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


# --- Shadow: the same requests on a Shadow-off twin -----------------------------------------

@pytest.fixture
def legacy_twin(app, backend, tmp_path, pg_databases):
    """twin(steps) plays steps on a Shadow-off app over a second empty database.

    Returns (callback answers, legacy_rows()); the test's own database is bound again after.
    """
    from qlshadow.core.auth import system_token
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
    from qlshadow.host.crontab import LOCK_DIRS
    return {path for directory in LOCK_DIRS for path in _glob.glob(os.path.join(directory, _LOCK_GLOB))}


# The crontab of the user running the tests is the machine's, not the tests': every test
# installs into a private spool or a file. A run that changed it put it back and fails.
_USER_CRONTAB = pytest.StashKey[object]()


def _user_crontab():
    """The user's own crontab as `crontab -l` prints it ("" for none), None without crontab."""
    import shutil
    import subprocess
    if shutil.which("crontab") is None:
        return None
    listed = subprocess.run(["crontab", "-l"], capture_output=True, text=True, timeout=30)
    return listed.stdout if listed.returncode == 0 else ""


def _restore_user_crontab(text: str) -> None:
    import subprocess
    if text:
        subprocess.run(["crontab", "-"], input=text, text=True, timeout=30, check=False)
    else:
        subprocess.run(["crontab", "-r"], capture_output=True, timeout=30, check=False)


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):
        session.config.stash[_LOCKS_BEFORE] = _crontab_lock_files()
        session.config.stash[_USER_CRONTAB] = _user_crontab()


def pytest_sessionfinish(session, exitstatus):
    before = session.config.stash.get(_LOCKS_BEFORE, None)
    if before is None:  # an xdist worker: the controller cleans up after all of them
        return
    crontab_before = session.config.stash.get(_USER_CRONTAB, None)
    if crontab_before is not None and _user_crontab() != crontab_before:
        _restore_user_crontab(crontab_before)
        print("\nqlshadow tests: a test changed this user's own crontab; it was put back",
              file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    for path in _crontab_lock_files() - before:
        try:
            os.unlink(path)
        except OSError:
            pass


@pytest.fixture(autouse=True)
def no_proxy_from_the_environment(monkeypatch):
    """Requests to loopback receivers must not detour through a proxy set on the host; a
    test that tries a proxy sets its own."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def receiver():
    """A real HTTP receiver on 127.0.0.1 (tests/receivers.py), closed after the test."""
    server = Receiver()
    yield server
    server.close()
