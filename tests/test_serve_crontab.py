"""`qlshadow serve` re-renders the crontab at start-up only once qlshadow owns one."""
import os

import pytest

from helpers import http


def _system_env(tmp_path):
    return {"QL_SCHEDULER": "system",
            "QL_CRONTAB_FILE": str(tmp_path / "crontab.list"),
            "QL_CRONTAB_INSTALL": f"cp {{file}} {tmp_path / 'installed.list'}",
            # installed.list holds only qlshadow's block: nothing else to keep.
            "QL_CRONTAB_LIST": ""}


@pytest.fixture(autouse=True)
def _forget_lock(tmp_path):
    """The lock file of this test's own crontab goes with the test."""
    yield
    from test_crontab_block import Target, forget_lock
    env = _system_env(tmp_path)
    forget_lock(Target(env["QL_CRONTAB_LIST"], env["QL_CRONTAB_INSTALL"]))


def test_a_first_start_without_crons_installs_no_crontab(live_server, tmp_path):
    server = live_server(**_system_env(tmp_path))
    status, _ = http("GET", server.url + "/health")
    assert status == 200
    assert not os.path.exists(tmp_path / "installed.list")
    assert not os.path.exists(tmp_path / "crontab.list")


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_first_start_in_a_fleet_installs_the_block_with_its_tick(live_server, make_settings,
                                                                 tmp_path):
    # A host of a fleet hears of crons named for it later through its tick (core/fleet.py).
    from qlshadow.web.views import create_app
    create_app(make_settings(QL_HOST_NAME="another-host"))  # the fleet's first host
    server = live_server(**_system_env(tmp_path), QL_HOST_NAME="joining-host")
    status, _ = http("GET", server.url + "/health")
    assert status == 200
    installed = (tmp_path / "installed.list").read_text()
    assert installed.rstrip().splitlines()[-2].endswith("/tick.sh")
    assert "task.sh" not in installed


def test_a_restart_reinstalls_the_crontab_it_already_owns(live_server, tmp_path):
    env = _system_env(tmp_path)
    server = live_server(**env)
    status, _ = http("POST", server.url + "/open/crons", headers=server.headers,
                     body={"name": "b", "command": "true", "schedule": "*/5 * * * *"})
    assert status == 200
    installed = tmp_path / "installed.list"
    # The URL tasks call is in runner.env, next to the token, not on the line.
    runner_env = tmp_path / "data" / "runner.env"
    first = installed.read_text()
    assert f"ql_base_url=http://127.0.0.1:{server.port}\n" in runner_env.read_text()
    os.unlink(installed)
    server.stop()
    again = live_server(**env)
    assert installed.read_text() == first
    assert f"ql_base_url=http://127.0.0.1:{again.port}\n" in runner_env.read_text()
