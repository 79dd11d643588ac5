"""End to end: real BusyBox crond runs a 70 s job every minute for three minutes. crond does
not start the line while its previous run is still going, so one firing in two is skipped;
`qlshadow reconcile` calls those `skipped (still running)`, not missed, and passes.

Both backends share the wait: the module starts one product + crond per backend at once.
"""
from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from helpers import BACKENDS, run_cli
from shellenv import SYSTEM_PATH, busybox_static, create_cron, runs_of, start_module_server, wait_for

# It waits three minutes of crond firings, and the last run's 70 s.
pytestmark = pytest.mark.slow

MINUTES = 3


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
            cron = create_cron(server, command="sleep 70", schedule="* * * * *")
            prepared[backend] = (server, cron["id"], spool)
        if time.time() % 60 > 55:  # start every crond within the same minute
            time.sleep(60 - time.time() % 60 + 0.5)
        since = (int(time.time()) // 60 + 1) * 60  # crond starts the minutes after its start
        until = since + MINUTES * 60
        logs = {}
        for backend, (_, _, spool) in prepared.items():
            logs[backend] = str(tmp_path_factory.mktemp(f"crond-{backend}") / "crond.log")
            daemons.append(subprocess.Popen(
                [bb, "crond", "-f", "-c", spool, "-L", logs[backend], "-l", "5"],
                env={"PATH": SYSTEM_PATH, "SHELL": "/bin/sh"}, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        time.sleep(max(0.0, until + 1 - time.time()))
        for daemon in daemons:  # no firing after the window: stop before the next minute
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(10)
        for backend, (server, cron_id, _) in prepared.items():
            wait_for(lambda server=server, cron_id=cron_id:
                     all(r["state"] == "exited" for r in runs_of(server, cron_id)),
                     timeout=90, interval=1)
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


def test_busybox_overlap_skips_are_not_misses_and_the_gate_passes(window):
    server, cron_id, since, until, log = window
    env = {"QL_DATA_DIR": server.data_dir, "QL_DB_URL": server.db_url,
           "QL_SCHEDULER": "system", "QL_CRONTAB_INSTALL": ""}
    result = run_cli(env, "reconcile", "--json", "--since", str(since), "--until", str(until),
                     check=False)
    with open(log, encoding="utf-8", errors="replace") as fh:
        crond_log = fh.read()
    assert result.returncode == 0, result.stdout + result.stderr + crond_log
    (report,) = json.loads(result.stdout)["data"]["crons"]
    assert report["expected"] == MINUTES, crond_log
    assert report["missed"] == [] and report["double"] == []
    assert report["runs"] + report["skipped_running"] == MINUTES
    assert report["skipped_running"] >= 1, crond_log
    assert report["verdict"] == "pass"
    assert any("skipped (still running)" in reason for reason in report["reasons"])
