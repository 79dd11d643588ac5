"""Real BusyBox crond runs the line the product installed, and the run appears once.

crond fires on minute boundaries, so this waits up to about a minute. Both backends share
that minute: the module starts one product + crond per backend before the first test.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from helpers import BACKENDS
from shellenv import (busybox_static, create_cron, runs_of, start_crond,
                      start_module_server, wait_for)

# It waits for crond's next minute.
pytestmark = pytest.mark.slow

WAIT = 75  # seconds: crond's next minute boundary, plus the task


class Setup:
    def __init__(self, server, cron_id: int, crond, spool: str, log: str, users_out: str):
        self.server, self.cron_id, self.crond, self.spool, self.log = server, cron_id, crond, spool, log
        self.users_out = users_out
        self.started = time.monotonic()

    def crond_log(self) -> str:
        with open(self.log, encoding="utf-8", errors="replace") as fh:
            return fh.read()




@pytest.fixture(scope="module")
def setups(tmp_path_factory):
    bb = busybox_static()
    prepared, problems, cleanups, started = {}, {}, [], {}
    try:
        for backend in BACKENDS:
            spool = str(tmp_path_factory.mktemp(f"spool-{backend}"))
            # root's crontab already holds a job of its own, as on a router.
            users_out = os.path.join(spool, "..", f"users-own-{backend}.out")
            seed = os.path.join(spool, "..", f"users-own-{backend}.crontab")
            with open(seed, "w") as fh:
                fh.write(users_own_crontab(users_out))
            subprocess.run([bb, "crontab", "-c", spool, seed], check=True)
            try:
                server, cleanup = start_module_server(
                    tmp_path_factory, backend, QL_SCHEDULER="system",
                    QL_CRONTAB_INSTALL=f"{bb} crontab -c {spool} {{file}}")
            except pytest.skip.Exception as exc:
                problems[backend] = str(exc)
                continue
            cleanups.append(cleanup)
            # Creating the cron renders the crontab and installs it with BusyBox crontab.
            cron = create_cron(server, command="echo tick", schedule="* * * * *")
            prepared[backend] = (server, cron["id"], spool, users_out)
        # Both crond processes must start within the same minute, or one waits a second one.
        if time.time() % 60 > 57:
            time.sleep(60 - time.time() % 60 + 0.5)
        for backend, (server, cron_id, spool, users_out) in prepared.items():
            log = str(tmp_path_factory.mktemp(f"crond-{backend}") / "crond.log")
            started[backend] = Setup(server, cron_id, start_crond(bb, spool, log), spool, log,
                                     users_out)
        yield started, problems
    finally:
        for setup in started.values():
            if setup.crond.poll() is None:
                setup.crond.send_signal(signal.SIGTERM)
                setup.crond.wait(10)
        for cleanup in cleanups:
            cleanup()


@pytest.fixture(params=BACKENDS)
def setup(request, setups):
    result, problems = setups
    if request.param in problems:
        pytest.skip(problems[request.param])
    return result[request.param]


def users_own_crontab(out: str) -> str:
    return f"SHELL=/bin/sh\n# root's own job\n* * * * * echo users-own >> {out}\n"


def test_the_installed_crontab_holds_the_active_line_after_the_users_own(setup):
    bb = busybox_static()
    listed = subprocess.run([bb, "crontab", "-c", setup.spool, "-l"], capture_output=True, text=True)
    assert f"* * * * * ID={setup.cron_id} QL_EXECUTION_ORIGIN=scheduled_system " in listed.stdout
    assert listed.stdout.startswith(users_own_crontab(setup.users_out) + "# BEGIN qlshadow ")


def test_crond_runs_the_installed_line_and_the_run_appears_once(setup):
    def exited():
        runs = runs_of(setup.server, setup.cron_id)
        return runs if runs and runs[0]["state"] == "exited" else None

    left = max(1.0, WAIT - (time.monotonic() - setup.started))
    runs = wait_for(exited, timeout=left, interval=0.5)
    assert runs, f"no exited run within {WAIT} s of crond's start; crond log:\n{setup.crond_log()}"
    assert len(runs) == 1
    assert runs[0]["exit_code"] == 0 and runs[0]["origin"] == "scheduled_system"
    # crond ran root's own line in the same minute: it was kept, not replaced.
    assert wait_for(lambda: os.path.exists(setup.users_out), timeout=5), setup.crond_log()
