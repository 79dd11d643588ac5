"""End to end: a data dir reached through a symlink, under real BusyBox crond. A server runs
on the data dir and a CLI cron change comes through the link; the crontab holds one block,
named by the real path, and one real crond minute gives each cron one Run, so the gate
passes with no `double` (both databases).

crond runs on a private spool (`crond -c`), never the machine's crontab.
"""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

from helpers import BACKENDS, run_cli
from shellenv import (busybox_static, create_cron, runs_of, start_crond,
                      start_module_server,
                      wait_for)
from test_crontab_block import forget_lock, Target

# It waits a minute of crond firings.
pytestmark = pytest.mark.slow




@pytest.fixture(scope="module")
def minutes(tmp_path_factory):
    """{backend: (link env, server, cron ids, since, until, crontab, crond log)} after one
    minute of crond."""
    bb = busybox_static()
    prepared, problems, cleanups, daemons, done = {}, {}, [], [], {}
    try:
        for backend in BACKENDS:
            spool = str(tmp_path_factory.mktemp(f"spool-{backend}"))
            target = Target(f"{bb} crontab -c {spool} -l", f"{bb} crontab -c {spool} {{file}}")
            cleanups.append(lambda target=target: forget_lock(target))
            install = {"QL_SCHEDULER": "system", "QL_CRONTAB_INSTALL": target.install,
                       "QL_CRONTAB_LIST": target.list}
            try:
                server, cleanup = start_module_server(tmp_path_factory, backend, **install)
            except pytest.skip.Exception as exc:
                problems[backend] = str(exc)
                continue
            cleanups.append(cleanup)
            link = os.path.join(os.path.dirname(server.data_dir), "datalink")
            os.symlink("data", link)
            env = {"QL_DATA_DIR": link, "QL_DB_URL": server.db_url, **install}
            by_api = create_cron(server, command="echo by-api", schedule="* * * * *")["id"]
            said = run_cli(env, "cron", "add", "* * * * *", "echo by-link")
            by_link = int(said.stdout.split()[2])
            prepared[backend] = (env, server, [by_api, by_link], spool, target)
        if time.time() % 60 > 55:  # start every crond within the same minute
            time.sleep(60 - time.time() % 60 + 0.5)
        since = (int(time.time()) // 60 + 1) * 60  # crond starts the minutes after its start
        until = since + 60
        logs = {}
        for backend, (*_, spool, _) in prepared.items():
            logs[backend] = str(tmp_path_factory.mktemp(f"crond-{backend}") / "crond.log")
            daemons.append(start_crond(bb, spool, logs[backend]))
        time.sleep(max(0.0, until + 1 - time.time()))
        for backend, (env, server, ids, _, target) in prepared.items():
            for cron_id in ids:
                wait_for(lambda server=server, cron_id=cron_id:
                         all(r["state"] == "exited" for r in runs_of(server, cron_id)),
                         timeout=20, interval=0.5)
            done[backend] = (env, server, ids, since, until, target.get().decode(),
                             logs[backend])
        yield done, problems
    finally:
        for daemon in daemons:
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
                daemon.wait(10)
        for cleanup in reversed(cleanups):
            cleanup()


@pytest.fixture(params=BACKENDS)
def minute(request, minutes):
    done, problems = minutes
    if request.param in problems:
        pytest.skip(problems[request.param])
    return done[request.param]


def test_the_crontab_holds_one_block_named_by_the_real_path(minute):
    env, server, ids, since, until, installed, _ = minute
    real = os.path.realpath(server.data_dir)
    assert installed.count("# BEGIN qlshadow ") == 1, installed
    assert f"# BEGIN qlshadow {real}\n" in installed and "datalink" not in installed
    for cron_id in ids:
        assert installed.count(f"ID={cron_id} ") == 1, installed


def test_one_crond_minute_gives_each_cron_one_run_and_the_gate_passes(minute):
    env, server, ids, since, until, _, log = minute
    with open(log, encoding="utf-8", errors="replace") as fh:
        crond_log = fh.read()
    for cron_id in ids:
        runs = [r for r in runs_of(server, cron_id)
                if since <= r["scheduled_at"] < until]
        assert len(runs) == 1, (cron_id, runs, crond_log)
    result = run_cli(env, "reconcile", "--json", "--since", str(since), "--until", str(until),
                     check=False)
    assert result.returncode == 0, result.stdout + result.stderr + crond_log
    data = json.loads(result.stdout)["data"]
    assert sorted(report["cron_id"] for report in data["crons"]) == sorted(ids)
    for report in data["crons"]:
        assert report["expected"] == report["runs"] == 1 and report["double"] == [], report
    assert data["gate"]["verdict"] == "pass"
