"""End to end: real BusyBox crond runs an every-minute cron for two minutes, then
`qlshadow reconcile --json` over exactly those two minutes finds expected == runs and passes.

Both backends share the wait: the module starts one product + crond per backend at once.
"""
from __future__ import annotations

import json
import signal
import time

import pytest

from helpers import BACKENDS, run_cli
from shellenv import (busybox_static, create_cron, runs_of, start_crond,
                      start_module_server, wait_for)

# It waits two minutes of crond firings.
pytestmark = pytest.mark.slow

MINUTES = 2




@pytest.fixture(scope="module")
def windows(tmp_path_factory):
    """{backend: (server, cron id, since, until, crond log)} after MINUTES of crond."""
    bb = busybox_static()
    prepared, problems, cleanups, daemons, done = {}, {}, [], [], {}
    try:
        for backend in BACKENDS:
            spool = str(tmp_path_factory.mktemp(f"spool-{backend}"))
            try:
                server, cleanup = start_module_server(
                    tmp_path_factory, backend, QL_SCHEDULER="system",
                    QL_CRONTAB_INSTALL=f"{bb} crontab -c {spool} {{file}}")
            except pytest.skip.Exception as exc:
                problems[backend] = str(exc)
                continue
            cleanups.append(cleanup)
            cron = create_cron(server, command="echo tick", schedule="* * * * *")
            prepared[backend] = (server, cron["id"], spool)
        if time.time() % 60 > 55:  # start every crond within the same minute
            time.sleep(60 - time.time() % 60 + 0.5)
        # crond starts the jobs of the minutes after its own start.
        since = (int(time.time()) // 60 + 1) * 60
        until = since + MINUTES * 60
        logs = {}
        for backend, (_, _, spool) in prepared.items():
            logs[backend] = str(tmp_path_factory.mktemp(f"crond-{backend}") / "crond.log")
            daemons.append(start_crond(bb, spool, logs[backend]))
        # The last firing's minute must have ended before the gate judges it.
        time.sleep(max(0.0, until + 1 - time.time()))
        for backend, (server, cron_id, _) in prepared.items():
            wait_for(lambda server=server, cron_id=cron_id:
                     all(r["state"] == "exited" for r in runs_of(server, cron_id)),
                     timeout=20, interval=0.5)
            done[backend] = (server, cron_id, since, until, logs[backend])
        yield done, problems
    finally:
        for daemon in daemons:
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
                daemon.wait(10)
        for cleanup in cleanups:
            cleanup()


@pytest.fixture(params=BACKENDS)
def window(request, windows):
    done, problems = windows
    if request.param in problems:
        pytest.skip(problems[request.param])
    return done[request.param]


def _cli_env(server) -> dict:
    return {"QL_DATA_DIR": server.data_dir, "QL_DB_URL": server.db_url,
            "QL_SCHEDULER": "system", "QL_CRONTAB_INSTALL": ""}


def test_reconcile_over_two_minutes_of_real_crond_finds_every_firing_once(window):
    server, cron_id, since, until, log = window
    result = run_cli(_cli_env(server), "reconcile", "--json", "--since", str(since),
                     "--until", str(until), check=False)
    with open(log, encoding="utf-8", errors="replace") as fh:
        crond_log = fh.read()
    assert result.returncode == 0, result.stdout + result.stderr + crond_log
    data = json.loads(result.stdout)["data"]
    (report,) = data["crons"]
    assert report["expected"] == report["runs"] == report["exited"] == MINUTES, crond_log
    assert report["missed"] == [] and report["double"] == []
    assert data["gate"]["verdict"] == report["verdict"] == "pass"


def test_the_table_report_over_the_same_window_says_pass(window):
    server, cron_id, since, until, log = window
    result = run_cli(_cli_env(server), "reconcile", "--since", str(since), "--until", str(until),
                     check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].endswith(": PASS")
    print(result.stdout)
