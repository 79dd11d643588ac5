"""Real BusyBox crond runs the block's tick line (shell/tick.sh, which asks the service): a
failing cron's message reaches a real loopback receiver once, with crond as the only clock
(waits up to about three minutes)."""
from __future__ import annotations

import signal
import subprocess
import time

import pytest

from shellenv import SYSTEM_PATH, busybox_static, create_cron, start_module_server, wait_for
from receivers import Receiver

pytestmark = pytest.mark.slow


def test_crond_runs_the_tick_line_and_a_failure_is_told_once(tmp_path_factory):
    bb = busybox_static()
    spool = str(tmp_path_factory.mktemp("spool"))
    receiver = Receiver()
    server, cleanup = start_module_server(
        tmp_path_factory, "sqlite", QL_SCHEDULER="system",
        QL_CRONTAB_INSTALL=f"{bb} crontab -c {spool} {{file}}",
        NTFY_URL=receiver.url, NTFY_TOPIC="ops")
    log = str(tmp_path_factory.mktemp("crond") / "crond.log")
    crond = None
    try:
        create_cron(server, name="nightly", command="echo disk full; exit 3",
                    schedule="* * * * *")
        listed = subprocess.run([bb, "crontab", "-c", spool, "-l"], capture_output=True,
                                text=True).stdout
        assert listed.splitlines()[-2].endswith("/tick.sh")
        crond = subprocess.Popen([bb, "crond", "-f", "-c", spool, "-L", log, "-l", "5"],
                                 env={"PATH": SYSTEM_PATH, "SHELL": "/bin/sh"},
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
        # The task fails in crond's first minute; the tick of that minute or the next sends.
        assert wait_for(lambda: receiver.requests, timeout=150, interval=1), open(log).read()
        time.sleep(65)  # one more minute: the cron fails again, the tick runs again
        titles = [r["headers"]["title"] for r in receiver.requests]
        assert titles == ["qlshadow: nightly failed"]
        body = receiver.requests[0]["body"].decode()
        assert "Exit code: 3." in body and body.endswith("disk full")
    finally:
        if crond is not None and crond.poll() is None:
            crond.send_signal(signal.SIGTERM)
            crond.wait(10)
        cleanup()
        receiver.close()
