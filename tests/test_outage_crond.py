"""End to end (issue 35): real BusyBox crond, a service outage and a lost finish.

A server with a loopback ntfy channel and Shadow on; BusyBox crond on a private spool runs
its block (the tick line included): a cron that sleeps 70 s every minute and one that
succeeds. The server is stopped while the sleeper runs, so the sleeper's finish is lost;
the next minute's tick line finds nobody and starts the Python tick, which tells the outage
once; the server starts again on the same port and data, and the tick line reaches it
again: the outage's end is told once, with no message per missed firing. Then the lost
finish carries the one rule's word in `qlshadow status`, `qlshadow runs`, GET /open/runs,
the strip, the cron and Run pages, GET /open/reconcile, `qlshadow reconcile` and /metrics.

The server, crond and the CLI run in one private PID namespace with its own /proc, so the
daemon they find (health's rule depends on it) is this test's BusyBox crond, whatever other
cron daemons the machine runs. Both backends share the wait: they go through the minutes
side by side (about four crond minutes).
"""
from __future__ import annotations

from http.client import HTTPConnection
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

import pytest

from harness import ROOT, Serve, clean_env
from helpers import BACKENDS, create_pg_database, drop_pg_database, http, run_cli
from qlshadow.watch import health
from shellenv import SYSTEM_PATH, busybox_static, create_cron, runs_of, wait_for, which
from receivers import Receiver

pytestmark = pytest.mark.slow

MINUTE = 60
DOWN = "qlshadow: the service is not answering"
UP = "qlshadow: the service is answering again"
WORDS = ("running", "stuck", "finish_lost")


def children(pid: int) -> list:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []


def sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.time()))


class Namespace:
    """A private PID namespace with its own /proc, held by a `sleep` as its init; killing
    the holder (by its PID) ends every process inside."""

    def __init__(self):
        self.holder = subprocess.Popen(
            [which("unshare"), "-p", "-f", "--mount-proc", "--kill-child", which("sleep"),
             "infinity"], stdin=subprocess.DEVNULL, start_new_session=True)
        self.init = wait_for(lambda: children(self.holder.pid), timeout=10)[0]

    def enter(self) -> list:
        return [which("nsenter"), "-t", str(self.init), "-p", "-m", "--"]

    def close(self) -> None:
        if self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait(10)


class Entered:
    """A program started through nsenter: stopped by the PID of the program itself."""

    def __init__(self, outer: subprocess.Popen):
        self.outer = outer
        self.pid = wait_for(lambda: children(outer.pid), timeout=10)[0]

    def stop(self) -> None:
        if self.outer.poll() is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.outer.wait(15)  # nsenter ends when the program has ended
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.outer.wait(10)


class World:
    """One backend's server, spool, receiver and crond."""

    def __init__(self, ns: Namespace, top: str, backend: str, bb: str):
        self.ns, self.backend, self.bb = ns, backend, bb
        base = os.path.join(top, backend)
        self.data_dir, self.spool = os.path.join(base, "data"), os.path.join(base, "spool")
        os.makedirs(self.data_dir)
        os.makedirs(self.spool)
        self.log = os.path.join(base, "crond.log")
        self.dropped = None
        if backend == "sqlite":
            self.db_url = f"sqlite:///{base}/qlshadow.db"
        else:
            self.db_url, self.dropped = create_pg_database()
        self.receiver = Receiver()
        self.env = {"QL_DATA_DIR": self.data_dir, "QL_DB_URL": self.db_url,
                    "QL_SCHEDULER": "system", "QL3_SHADOW_ORIGINS": "scheduled_system",
                    "QL_CRONTAB_INSTALL": f"{bb} crontab -c {self.spool} {{file}}",
                    "NTFY_URL": self.receiver.url, "NTFY_TOPIC": "ops"}
        self.server = self.crond = None
        self.port = 0

    def start_server(self) -> None:
        full = clean_env({**self.env, "QL_HOST": "127.0.0.1", "QL_PORT": str(self.port)})
        run_cli(full, "token", "system")
        with open(os.path.join(self.data_dir, "token.json")) as fh:
            self.headers = {"Authorization": f"Bearer {json.load(fh)['value']}"}
        serve = Serve(env=full, wrapper=self.ns.enter()).start()
        self.server = Entered(serve.process)
        self.port, self.url = serve.port, serve.url

    def stop_server(self) -> None:
        if self.server is not None:
            self.server.stop()

    def start_crond(self) -> None:
        self.crond = Entered(subprocess.Popen(
            [*self.ns.enter(), self.bb, "crond", "-f", "-c", self.spool, "-L", self.log,
             "-l", "5"], env={"PATH": SYSTEM_PATH, "SHELL": "/bin/sh"},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True))

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        """`qlshadow ARGS` inside the namespace, on this world's database and data dir."""
        env = clean_env({k: v for k, v in self.env.items() if k.startswith(("QL_", "QL3_"))}
                        | {"QL_CRONTAB_INSTALL": ""})
        return subprocess.run([*self.ns.enter(), sys.executable, "-m", "qlshadow.cli", *args],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)

    def crond_log(self) -> str:
        try:
            with open(self.log, encoding="utf-8", errors="replace") as fh:
                return fh.read()
        except FileNotFoundError:
            return ""

    def close(self) -> None:
        if self.crond is not None:
            self.crond.stop()
        self.stop_server()
        self.receiver.close()
        if self.dropped:
            drop_pg_database(self.dropped)


def titles(world: World) -> list:
    return [r["headers"].get("title") for r in world.receiver.requests]


@pytest.fixture(scope="module")
def worlds():
    """{backend: (world, the first crond minute)} once the outage has come and gone."""
    bb = busybox_static()
    top = tempfile.mkdtemp(prefix="qlshadow-outage-")
    ns = Namespace()
    made = {}
    try:
        for backend in BACKENDS:
            made[backend] = World(ns, top, backend, bb)
            made[backend].start_server()
        # The crons are made and every crond starts within one minute: no firing of theirs
        # comes before crond runs (it would be missed, and told).
        if time.time() % MINUTE > 45:
            sleep_until((time.time() // MINUTE + 1) * MINUTE + 0.5)
        m0 = (int(time.time()) // MINUTE + 1) * MINUTE  # crond's first firing
        for world in made.values():
            world.sleeper = create_cron(world, name="sleeper", command="sleep 70")["id"]
            world.fine = create_cron(world, name="fine", command="exit 0")["id"]
            world.start_crond()
        assert time.time() < m0, "the crons were made too late in the minute"
        # The first minute runs with the service up; it is stopped while the sleeper runs.
        for world in made.values():
            assert wait_for(lambda w=world: runs_of(w, w.sleeper) and all(
                r["state"] == "exited" for r in runs_of(w, w.fine)),
                timeout=m0 + 40 - time.time(), interval=0.5), world.crond_log()
            world.stop_server()
        # The next minute the tick line finds nobody: the Python tick tells the outage.
        for world in made.values():
            assert wait_for(lambda w=world: DOWN in titles(w), timeout=m0 + 2 * MINUTE - 5
                            - time.time(), interval=0.5), world.crond_log()
        sleep_until(m0 + 80)  # the sleeper ended at about m0 + 70: its finish is lost
        for world in made.values():
            world.start_server()  # same port, data dir and database
        # The minute after, crond starts the sleeper again and the tick line reaches the
        # service, which tells the outage's end.
        for world in made.values():
            assert wait_for(lambda w=world: UP in titles(w), timeout=m0 + 3 * MINUTE - 5
                            - time.time(), interval=0.5), world.crond_log()
        # One minute more: the outage's firings are judged by then, and told by nobody.
        sleep_until(m0 + 3 * MINUTE + 30)
        for world in made.values():
            world.crond.stop()
        for world in made.values():  # the sleeper's run of m0 + 2 minutes has ended
            wait_for(lambda w=world: sum(r["state"] == "exited"
                                         for r in runs_of(w, w.sleeper)) >= 1, timeout=30)
        yield {backend: (world, m0) for backend, world in made.items()}
    finally:
        for world in made.values():
            world.close()
        ns.close()
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(params=BACKENDS)
def world(request, worlds):
    return worlds[request.param]


def test_the_outage_is_one_message_and_one_recovery_and_no_missed_firing(world):
    world, m0 = world
    # The outage did cost a firing: the cron that succeeds had no run in its second minute.
    status, gate = http("GET", f"{world.url}/open/reconcile?since={m0}&until="
                        f"{m0 + 2 * MINUTE}&cron_id={world.fine}", headers=world.headers)
    assert status == 200, gate
    assert gate["data"]["crons"][0]["missed"] == [m0 + MINUTE], gate
    # Whatever misses the tick found are the outage's, told by its messages only.
    status, log = http("GET", f"{world.url}/open/notifications", headers=world.headers)
    assert status == 200, log
    missed = {(r["name"], r["outcome"]) for r in log["data"] if r["state"] == "missed"}
    assert ("fine", "outage") in missed and {o for _, o in missed} == {"outage"}, log
    told = titles(world)
    assert told.count(DOWN) == 1 and told.count(UP) == 1, (told, world.crond_log())
    assert told.index(DOWN) < told.index(UP)
    assert not [t for t in told if "missed" in t], told
    assert told == [DOWN, UP], told
    assert f"not answering at {world.url} since " in world.receiver.requests[0]["body"].decode()


def page_session(world) -> dict:
    """Headers of a page session of a viewer app made with `qlshadow app create`."""
    made = world.cli("app", "create", "viewer", "--scopes", "crons,runs")
    assert made.returncode == 0, made.stderr
    app = json.loads(made.stdout)
    conn = HTTPConnection("127.0.0.1", world.port, timeout=30)
    conn.request("POST", "/page/login", urllib.parse.urlencode(
        {"client_id": app["client_id"], "client_secret": app["client_secret"]}),
        {"Content-Type": "application/x-www-form-urlencoded"})
    response = conn.getresponse()
    response.read()
    conn.close()
    assert response.status == 303
    cookie = response.getheader("Set-Cookie").split(";")[0]
    return {"Cookie": cookie}


def page(world, path: str, headers: dict) -> str:
    status, body = http("GET", world.url + path, headers=headers)
    assert status == 200, body
    return body.decode()


def test_the_lost_finish_has_the_same_word_on_every_surface(world):
    world, m0 = world
    runs = sorted(runs_of(world, world.sleeper), key=lambda r: r["accepted_at"])
    (lost,) = [r for r in runs if m0 <= r["accepted_at"] < m0 + MINUTE]
    later = [r["accepted_at"] for r in runs if r["accepted_at"] > lost["accepted_at"]]
    assert later, world.crond_log()  # crond started it again once it had ended
    now = int(time.time())
    # The rule: an open run with a later start crond made is a lost finish under BusyBox
    # crond (the only daemon in the namespace), whatever its age.
    word, _ = health.condition(lost["accepted_at"], 0, now, min(later), overlapping=False)
    counts = {w: int(w == word) for w in WORDS}
    spoken = word.replace("_", " ")
    run_id = lost["id"]

    # GET /open/runs and /open/runs/<id>: the lost one has the word, the others exited.
    assert {r["id"]: r["condition"] for r in runs} == {
        r["id"]: word if r["id"] == run_id else "exited" for r in runs}
    status, one = http("GET", f"{world.url}/open/runs/{run_id}", headers=world.headers)
    assert (status, one["data"]["state"], one["data"]["condition"]) == (200, "running", word)

    # qlshadow status, JSON and text.
    shown = world.cli("status", "--json")
    rows = {r["cron_id"]: r for r in json.loads(shown.stdout)["data"]}
    assert rows[world.sleeper]["open"] == counts, shown.stdout
    assert rows[world.fine]["open"] == dict.fromkeys(WORDS, 0)
    text = world.cli("status").stdout
    assert (f"open executions: {counts['running']} running, {counts['stuck']} stuck, "
            f"{counts['finish_lost']} finish lost") in text.splitlines(), text

    # qlshadow runs --json, and --state picks it.
    listed = json.loads(world.cli("runs", "--json").stdout)["data"]
    assert [r["condition"] for r in listed if r["id"] == run_id] == [word]
    assert [r["id"] for r in json.loads(
        world.cli("runs", "--state", word, "--json").stdout)["data"]] == [run_id]

    # The strip, the cron page and the Run page.
    session = page_session(world)
    strip = page(world, "/page/", session)
    assert f"1 {spoken}" in strip
    cron_page = page(world, f"/page/crons/{world.sleeper}", session)
    assert re.findall(r'<rect class="(finish_lost|stuck|running)"', cron_page) == [word]
    run_page = page(world, f"/page/runs/{run_id}", session)
    assert f'<span class="{word}">{spoken}</span>' in run_page

    # The gate: GET /open/reconcile and `qlshadow reconcile`.
    since = m0 - MINUTE
    status, gate = http("GET", f"{world.url}/open/reconcile?since={since}&cron_id="
                        f"{world.sleeper}", headers=world.headers)
    assert status == 200, gate
    (report,) = gate["data"]["crons"]
    assert {w: report[w] for w in WORDS} == counts
    printed = world.cli("reconcile", "--json", "--since", str(since))
    (report,) = [c for c in json.loads(printed.stdout)["data"]["crons"]
                 if c["cron_id"] == world.sleeper]
    assert {w: report[w] for w in WORDS} == counts

    # /metrics: the open executions by condition.
    token = world.cli("token", "metrics")
    assert token.returncode == 0, token.stderr
    status, body = http("GET", f"{world.url}/metrics",
                        headers={"Authorization": f"Bearer {token.stdout.strip()}"})
    assert status == 200
    metrics = body.decode()
    for w in WORDS:
        assert (f'qlshadow_cron_open_executions{{cron_id="{world.sleeper}",name="sleeper",'
                f'condition="{w}"}} {counts[w]}') in metrics, metrics
