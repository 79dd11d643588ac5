"""The service on emulated 32-bit routers: Debian armhf and mipsel python3.11 under qemu
user mode (32-bit pointers, 32-bit time_t), on SQLite and on the host's PostgreSQL.

scripts/prepare_32bit.py unpacks the userlands and the shared pure-Python folder (.ci/run
calls it). Without them the tests skip on a laptop, but fail when CI or QL_REQUIRE_32BIT=1
is set, so CI cannot pass by skipping them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from helpers import Serve, http, run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import prepare_32bit  # noqa: E402  (a script, not a package)

pytestmark = pytest.mark.slow
ARCHES = sorted(prepare_32bit.ARCHES)
AFTER_2038 = 2**31 + 3600  # 2038-01-19 04:14:08 UTC, one hour past a 32-bit time_t
# A POSIX TZ rule, as OpenWrt writes it: local time with DST and no zoneinfo files.
TZ = "CET-1CEST,M3.5.0,M10.5.0/3"
EID = "legacy-system:{s}:{n:08x}-9d4a-4e6b-8f1a-2c3d4e5f6a7b"


@pytest.fixture(scope="module")
def prepared() -> None:
    """Skip (or fail, in CI) when the emulators or the userlands are missing."""
    reason = prepare_32bit.missing()
    if reason:
        if os.environ.get("CI", "").lower() not in ("", "0", "false") \
                or os.environ.get("QL_REQUIRE_32BIT") == "1":
            pytest.fail(f"the 32-bit runs are required here (CI or QL_REQUIRE_32BIT=1), "
                        f"but {reason}")
        pytest.skip(reason)


class Emulated:
    """One architecture's python3.11 under qemu, importing this source tree's qlshadow."""

    def __init__(self, arch: str, tmp_path, env: dict):
        # qlshadow is the source tree's app/ (setup.cfg's package_dir); shell/ beside it is
        # where qlshadow.host.crontab finds task.sh.
        path = tmp_path / f"path-{arch}"
        path.mkdir()
        (path / "qlshadow").symlink_to(os.path.join(ROOT, "app"))
        (path / "shell").symlink_to(os.path.join(ROOT, "shell"))
        self.argv = prepare_32bit.command(arch)
        self.env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8", "TZ": TZ,
                    "PYTHONPATH": f"{path}:{prepare_32bit.site_path()}",
                    **env}

    def python(self, code: str) -> str:
        """Run code in the emulated Python; its stdout."""
        done = subprocess.run(self.argv + ["-c", code], env=self.env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        """`qlshadow ARGS` in the emulated Python."""
        return subprocess.run(self.argv + ["-m", "qlshadow.cli", *args], env=self.env,
                              capture_output=True, text=True, timeout=300)


class EmulatedServer(Serve):
    """`qlshadow serve` under qemu on a free loopback port (harness.Serve); stopped by its PID."""

    def __init__(self, emulated: Emulated, log_path: str):
        # Emulated start-up takes seconds; the limit only keeps a broken start from hanging.
        super().__init__(emulated.argv + ["-m", "qlshadow.cli", "serve"],
                         env={**emulated.env, "QL_HOST": "127.0.0.1", "QL_PORT": "0"},
                         log_path=log_path, timeout=300)
        self.start()


@pytest.fixture
def emulated(prepared, tmp_path, db_url):
    """A function arch -> Emulated with a data dir and the test's database."""
    def make(arch: str) -> Emulated:
        return Emulated(arch, tmp_path, {
            "QL_DATA_DIR": str(tmp_path / "data"), "QL_DB_URL": db_url,
            "QL_SCHEDULER": "system", "QL_CRONTAB_INSTALL": "",
            "QL_CRONTAB_FILE": str(tmp_path / "data" / "crontab.list"),
            "QL3_SHADOW_ORIGINS": "scheduled_system"})
    return make


@pytest.fixture
def emulated_server(tmp_path):
    servers = []

    def start(emulated: Emulated) -> EmulatedServer:
        server = EmulatedServer(emulated, str(tmp_path / f"server-{len(servers)}.log"))
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize("arch", ARCHES)
def test_the_emulated_python_has_32_bit_pointers_and_a_32_bit_time_t(emulated, arch):
    shown = emulated(arch).python(
        "import platform, struct, time\n"
        "try:\n    time.gmtime(2**31); wide = 'wide'\n"
        "except OverflowError:\n    wide = 'narrow'\n"
        "print(platform.architecture()[0], struct.calcsize('P'), platform.machine(), wide)")

    bits, pointer, machine, time_t = shown.split()
    assert (bits, pointer, time_t) == ("32bit", "4", "narrow")
    assert machine == {"armhf": "armv7l", "mipsel": "mips"}[arch]


def _login(url: str, client_id: str, secret: str) -> str:
    """Sign in to the page; the session cookie as a Cookie header value."""
    class Keep(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None  # the 303 itself carries the cookie
    opener = urllib.request.build_opener(Keep)
    body = urllib.parse.urlencode({"client_id": client_id, "client_secret": secret}).encode()
    try:
        opener.open(urllib.request.Request(url + "/page/login", data=body, method="POST"),
                    timeout=120)
    except urllib.error.HTTPError as answer:
        assert answer.code == 303, answer.read()
        return answer.headers["Set-Cookie"].split(";", 1)[0]
    raise AssertionError("sign-in did not redirect")


def _page(url: str, path: str, cookie: str) -> tuple:
    status, body = http("GET", url + path, headers={"Cookie": cookie}, timeout=120)
    return status, body.decode() if isinstance(body, bytes) else body


def _callback(server, headers, cron_id: int, status: int, started: int, execution_id=None):
    body = {"ids": [cron_id], "status": status, "pid": 4242, "log_path": "backup/x.log",
            "last_execution_time": started}
    if status == 1:
        body.update(last_running_time=7, exit_code=0)
    if execution_id is not None:
        body["execution_id"] = execution_id
    return http("PUT", server.url + "/open/crons/status", body, headers, timeout=120)


# SQLite on both; PostgreSQL (Debian's psycopg2 in the userland, the host's server) on one,
# to keep CI short: its code path is the same on every 32-bit architecture.
@pytest.mark.parametrize("arch, backend", [("armhf", "sqlite"), ("mipsel", "sqlite"),
                                           ("armhf", "postgres")])
def test_the_service_serves_and_renders_times_after_2038_on_a_32_bit_router(
        emulated, emulated_server, arch):
    box = emulated(arch)
    # The host's CLI makes the app (each emulated command costs seconds).
    made = run_cli({k: v for k, v in box.env.items() if k.startswith("QL")},
                   "app", "create", "watcher", "--scopes", "crons,runs,metrics")
    watcher = json.loads(made.stdout)
    server = emulated_server(box)
    status, answer = http("GET", server.url + "/open/auth/token?" + urllib.parse.urlencode(
        {"client_id": watcher["client_id"], "client_secret": watcher["client_secret"]}),
        timeout=120)
    assert status == 200, answer
    headers = {"Authorization": f"Bearer {answer['data']['token']}"}
    status, answer = http("POST", server.url + "/open/crons", headers=headers, timeout=120,
                          body={"name": "backup", "command": "task backup.sh",
                                "schedule": "*/5 * * * *"})
    assert status == 200, answer
    cron_id = answer["data"]["id"]
    now = int(time.time())

    # Today, without and with an execution id.
    assert _callback(server, headers, cron_id, 0, now - 120) == (200, {"code": 200})
    assert _callback(server, headers, cron_id, 1, now - 120) == (200, {"code": 200})
    today = EID.format(s=now - 60, n=1)
    assert _callback(server, headers, cron_id, 0, now - 60, today) == (200, {"code": 200})
    assert _callback(server, headers, cron_id, 1, now - 60, today) == (200, {"code": 200})
    cookie = _login(server.url, watcher["client_id"], watcher["client_secret"])
    for path in ("/page/", f"/page/crons/{cron_id}", "/page/gate"):
        assert _page(server.url, path, cookie)[0] == 200, path
    assert http("GET", server.url + "/metrics", headers=headers, timeout=120)[0] == 200
    status, gate = http("GET", server.url + "/open/reconcile", headers=headers, timeout=120)
    assert status == 200, gate

    # After 2038: a start time and an execution id's seconds past a 32-bit time_t.
    later = EID.format(s=AFTER_2038, n=2)
    assert _callback(server, headers, cron_id, 0, AFTER_2038, later) == (200, {"code": 200})
    assert _callback(server, headers, cron_id, 1, AFTER_2038, later) == (200, {"code": 200})
    status, runs = http("GET", server.url + f"/open/runs?cron_id={cron_id}", headers=headers,
                        timeout=120)
    assert status == 200, runs
    assert sorted(run["accepted_at"] for run in runs["data"]) == [now - 60, AFTER_2038]
    assert {run["state"] for run in runs["data"]} == {"exited"}
    status, listing = _page(server.url, "/page/", cookie)
    assert status == 200, listing
    assert "2038-01-19 04:14 UTC" in listing  # beyond local time: shown in UTC, said so
    status, detail = _page(server.url, f"/page/crons/{cron_id}", cookie)
    assert status == 200, detail
    assert "2038-01-19 04:14 UTC" in detail
    assert _page(server.url, "/page/gate", cookie)[0] == 200
    status, gate = http("GET", server.url + "/open/reconcile", headers=headers, timeout=120)
    assert status == 200, gate
    status, text = http("GET", server.url + "/metrics", headers=headers, timeout=120)
    assert status == 200, text
    assert f'qlshadow_cron_last_finish_timestamp_seconds{{cron_id="{cron_id}"' in text.decode()
    # A gate window past what this box's local time reaches: a clear 400, not a 500.
    status, refused = http("GET", server.url + "/open/reconcile?" + urllib.parse.urlencode(
        {"since": AFTER_2038 - 86400, "until": AFTER_2038}), headers=headers, timeout=120)
    assert (status, refused["code"]) == (400, 400), refused
    assert "'until'" in refused["message"]
    server.stop()

    # The CLI on the same data: the crontab, the gate's report, prune.
    printed = box.cli("crontab", "--print")
    assert printed.returncode == 0, printed.stderr
    assert "*/5 * * * *" in printed.stdout and "task.sh" in printed.stdout
    report = box.cli("reconcile")
    assert report.returncode in (0, 1, 3), report.stderr  # a verdict, never a crash
    assert "Traceback" not in report.stderr
    pruned = box.cli("prune")
    assert pruned.returncode == 0, pruned.stderr
    assert isinstance(json.loads(pruned.stdout), dict)
