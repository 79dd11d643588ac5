"""Three hosts on one PostgreSQL database, each its own data dir, QL_HOST_NAME and BusyBox
crond on a private spool, with crond as the only clock (waits about four minutes): a cron
named for one host runs only there, ["*"] runs on all three, a `one` cron runs exactly once
per firing (all up, then with one host's crond stopped), every execution a Run naming its
host; a change of hosts reaches another host's block at that host's tick."""
from __future__ import annotations

import collections
import os
import signal
import subprocess
import time

import pytest

from helpers import LiveServer, create_pg_database, drop_pg_database, http
from shellenv import SYSTEM_PATH, busybox_static, create_cron, wait_for

pytestmark = pytest.mark.slow

HOSTS = ("alpha", "beta", "gamma")


def start_crond(bb: str, spool: str, log: str) -> subprocess.Popen:
    return subprocess.Popen([bb, "crond", "-f", "-c", spool, "-L", log, "-l", "5"],
                            env={"PATH": SYSTEM_PATH, "SHELL": "/bin/sh"},
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def stop(process: subprocess.Popen | None) -> None:
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGTERM)
        process.wait(10)


def test_three_hosts_each_run_their_crons_and_a_one_cron_once_per_firing(tmp_path):
    bb = busybox_static()
    url, name = create_pg_database()
    servers, cronds, spools = {}, {}, {}
    try:
        for host in HOSTS:
            base = tmp_path / host
            spools[host] = str(base / "spool")
            os.makedirs(spools[host])
            env = {"QL_DATA_DIR": str(base / "data"), "QL_DB_URL": url,
                   "QL_HOST_NAME": host, "QL_SCHEDULER": "system",
                   "QL_CRONTAB_INSTALL": f"{bb} crontab -c {spools[host]} {{file}}",
                   "QL3_SHADOW_ORIGINS": "scheduled_system"}
            servers[host] = LiveServer(env)
            if host == "alpha":  # the crons exist before the others start: they install at start
                alpha = servers["alpha"]
                alpha.db_url = url
                only_beta = create_cron(alpha, command="echo beta-only", hosts=["beta"])
                everywhere = create_cron(alpha, command="echo everywhere", hosts=["*"])
                once = create_cron(alpha, command="echo once", hosts=["*"], hosts_mode="one")
        for host in HOSTS:
            cronds[host] = start_crond(bb, spools[host], str(tmp_path / host / "crond.log"))

        def runs(cron: dict) -> list:
            status, body = http("GET", f"{alpha.url}/open/runs?cron_id={cron['id']}&limit=500",
                                headers=alpha.headers)
            assert status == 200, body
            return body["data"]

        def hosts_by_minute(cron: dict) -> dict:
            seen = collections.defaultdict(list)
            for run in runs(cron):
                seen[run["accepted_at"] // 60].append(run["host"])
            return seen

        def full_minutes() -> list:
            return [m for m, h in hosts_by_minute(everywhere).items() if sorted(h) == list(HOSTS)]

        assert wait_for(lambda: len(full_minutes()) >= 2, timeout=200, interval=2)

        # gamma's crond stops; a change made on alpha moves beta's cron to gamma, and beta's
        # own tick takes it out of beta's block.
        stop(cronds.pop("gamma"))
        stopped_at = time.time() // 60
        status, body = http("PUT", f"{alpha.url}/open/crons",
                            {"id": only_beta["id"], "hosts": ["gamma"]}, alpha.headers)
        assert status == 200, body

        def beta_block() -> str:
            return subprocess.run([bb, "crontab", "-c", spools["beta"], "-l"],
                                  capture_output=True, text=True).stdout

        assert wait_for(lambda: "beta-only" not in beta_block(), timeout=130, interval=2)
        assert wait_for(lambda: any(m > stopped_at and sorted(h) == ["alpha", "beta"]
                                    for m, h in hosts_by_minute(everywhere).items()),
                        timeout=130, interval=2)
        time.sleep(5)  # the last tasks' idle callbacks

        assert {r["host"] for r in runs(only_beta)} == {"beta"}
        assert {r["host"] for r in runs(everywhere)} == set(HOSTS)
        once_minutes = hosts_by_minute(once)
        assert once_minutes and all(len(h) == 1 for h in once_minutes.values()), once_minutes
        # Every minute the fleet ran `everywhere` in, after the first full one, `once` ran.
        first = min(full_minutes())
        for minute in hosts_by_minute(everywhere):
            if minute > first:
                assert minute in once_minutes, (minute, once_minutes)
        assert all(r["state"] == "exited" and r["exit_code"] == 0
                   for cron in (only_beta, everywhere, once) for r in runs(cron))
    finally:
        for process in cronds.values():
            stop(process)
        for server in servers.values():
            server.stop()
        drop_pg_database(name)
