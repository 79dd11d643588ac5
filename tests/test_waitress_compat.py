"""waitress's undocumented names live in web/waitress_compat.py only, pinned to the tested
minor range; a waitress that lacks one gets one start-up line naming it, and callbacks are
still answered, on the "lock" lane."""
from __future__ import annotations

import configparser
import json
import os
import sys

from helpers import ROOT, Serve, clean_env, fixture_body, http, run_cli
from qlshadow.web import waitress_compat


def test_the_installed_waitress_has_every_name_the_loop_lane_uses():
    assert waitress_compat.missing() == []
    assert waitress_compat.check() is None


def test_a_waitress_whose_channel_cannot_send_is_told_by_that_name(monkeypatch):
    from waitress import wasyncore
    monkeypatch.delattr(wasyncore.dispatcher, "send")

    assert waitress_compat.missing() == ["waitress.channel.HTTPChannel.send"]
    assert "has no waitress.channel.HTTPChannel.send, which the callback lane uses (tested: " \
           f"{waitress_compat.TESTED})" in waitress_compat.check()


# waitress's create_server without its `_dispatcher` test shim, as a later waitress may ship it.
_WITHOUT_DISPATCHER = """
import sys, waitress.server
real = waitress.server.create_server
def create_server(application, map=None, **adjustments):
    return real(application, map, **adjustments)
waitress.server.create_server = create_server
from qlshadow.cli import main
sys.exit(main(["serve"]))
"""


def test_a_start_on_a_waitress_missing_a_name_says_so_in_one_line_and_answers_callbacks(tmp_path):
    from importlib.metadata import version
    data = tmp_path / "data"
    env = clean_env({"QL_DATA_DIR": str(data), "QL_DB_URL": f"sqlite:///{data}/q.db",
                     "QL_HOST": "127.0.0.1", "QL_PORT": "0", "QL_SCHEDULER": "node"})
    run_cli(env, "token", "system")
    with open(data / "token.json", encoding="utf-8") as fh:
        headers = {"Authorization": f"Bearer {json.load(fh)['value']}"}
    server = Serve([sys.executable, "-c", _WITHOUT_DISPATCHER], env=env,
                   log_path=str(tmp_path / "serve.log"), timeout=60)
    with server:
        url = f"http://127.0.0.1:{server.port}"
        created = http("POST", url + "/open/crons", headers=headers,
                       body={"name": "backup", "command": "task backup.sh", "schedule": "@boot"})
        answer = http("PUT", url + "/open/crons/status", headers=headers,
                      body=fixture_body("callback_running", ids=["1"]))
        status = http("GET", url + "/open/crons/1", headers=headers)[1]["data"]["status"]

    assert created[0] == 200
    assert answer == (200, {"code": 200})
    assert status == 0
    warnings = [line for line in server.output().splitlines() if "warning" in line]
    assert warnings == [
        f"qlshadow: warning: waitress {version('waitress')} has no "
        "waitress.server.create_server(_dispatcher=), which the callback lane uses (tested: "
        f"{waitress_compat.TESTED}); callbacks run on the worker threads, one at a time"]


def test_setup_cfg_pins_waitress_to_the_tested_range():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    assert waitress_compat.TESTED in cfg["options"]["install_requires"].split()


def test_no_module_but_the_compat_module_names_a_private_waitress_name():
    private = ("_dispatcher", "total_outbufs_len", "pull_trigger", "handle_accept", "._map",
               ".adj.", "wasyncore", "ThreadedTaskDispatcher", "channel.requests",
               "channel.service", "channel.send")
    offenders = []
    for base, _, files in os.walk(os.path.join(ROOT, "app")):
        for name in files:
            path = os.path.join(base, name)
            if not name.endswith(".py") or path.endswith("waitress_compat.py"):
                continue
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            offenders += [f"{path}: {word}" for word in private if word in text]
    assert offenders == []
