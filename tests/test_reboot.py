"""A Run open at a reboot is closed as lost at reboot by the first start of the next boot; a
restart of the service in the same boot closes nothing (storage/reboot.py). On SQLite (one
host) every open Run; on PostgreSQL, which hosts share, only this host's."""
from __future__ import annotations

import time

import pytest

from qlshadow.storage import db
from qlshadow.storage.models import (CRON_IDLE, CRON_RUNNING, INSTANCE_FINISHED, INSTANCE_STOPPED,
                                     Cron, HostBoot, RunningInstance)
from qlshadow.storage.reboot import boot_id, note_boot
from helpers import cli_env, run_cli, table_rows
from reconcile_history import fire, new_cron

pytestmark = pytest.mark.shadow_on


def runs(client, auth) -> dict:
    answer = client.get("/open/runs?limit=50", headers=auth).get_json()["data"]
    return {run["accepted_at"]: run for run in answer}


@pytest.fixture
def open_and_done(client, auth):
    """A cron with one finished Run and one still running; returns their start seconds."""
    now = int(time.time()) // 300 * 300
    cron_id = new_cron(client, auth, "*/5 * * * *", now - 650)  # its firings since: these two
    fire(client, auth, cron_id, now - 600)
    fire(client, auth, cron_id, now - 300, finish=False)
    return now - 600 + 1, now - 300 + 1


def test_the_service_records_this_boot_when_it_first_opens_the_database(app):
    (row,) = table_rows(HostBoot, HostBoot.host)
    assert row["boot_id"] == boot_id() and len(row["boot_id"]) == 36


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_new_boot_closes_the_runs_left_running_as_lost_at_reboot(client, auth, open_and_done):
    done, running = open_and_done
    before = runs(client, auth)
    assert before[running]["state"] == "running"
    with db.connected():
        assert note_boot(db.database.obj, current="next-boot", now=running + 7200) == 1
    after = runs(client, auth)
    lost = after[running]
    assert (lost["state"], lost["exit_code"], lost["finished_at"]) == ("exited", None, running + 7200)
    assert lost["outcome"] == "lost at reboot"
    assert [e["kind"] for e in lost["events"]] == ["accepted", "spawned", "running", "exited"]
    assert lost["attempt"]["state"] == "exited" and lost["attempt"]["exited_at"] == running + 7200
    assert after[done] == before[done] and "outcome" not in after[done]
    instances = {i["started_at"]: i for i in table_rows(RunningInstance)}
    assert (instances[running]["status"], instances[running]["finished_at"],
            instances[running]["exit_code"]) == (INSTANCE_STOPPED, running + 7200, None)
    assert instances[done]["status"] == INSTANCE_FINISHED
    (cron,) = table_rows(Cron)
    assert cron["status"] == CRON_IDLE
    with db.connected():  # the same boot again: a restart closes nothing
        assert note_boot(db.database.obj, current="next-boot", now=running + 7300) == 0
    assert runs(client, auth) == after


def test_a_restart_in_the_same_boot_leaves_running_runs_open(client, auth, settings, open_and_done):
    _, running = open_and_done
    run_cli(cli_env(settings), "db", "init")  # opens the database as `serve` does
    assert runs(client, auth)[running]["state"] == "running"
    assert table_rows(Cron)[0]["status"] == CRON_RUNNING


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_start_after_a_real_reboot_closes_them(client, auth, settings, open_and_done):
    _, running = open_and_done
    # The boot recorded is an earlier one: this process's real boot id differs from it.
    with db.connected(), db.write_transaction():
        HostBoot.update(boot_id="an-earlier-boot").execute()
    result = run_cli(cli_env(settings), "db", "init")
    assert "1 Run(s) left running by the boot before were closed as lost at reboot" in result.stderr
    lost = runs(client, auth)[running]
    assert lost["state"] == "exited" and lost["outcome"] == "lost at reboot"
    (row,) = table_rows(HostBoot, HostBoot.host)
    assert row["boot_id"] == boot_id()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_lost_run_is_neither_failed_nor_stuck_in_the_gate(client, auth, open_and_done):
    from qlshadow.watch.reconcile import reconcile
    _, running = open_and_done
    with db.connected():
        note_boot(db.database.obj, current="next-boot", now=running + 7200)
        (report,) = reconcile(running - 3600, running + 60, now=running + 7200)["crons"]
    assert (report["runs"], report["exited"], report["failed"], report["stuck"]) == (2, 2, 0, 0)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_clock_behind_at_boot_never_closes_a_run_before_its_start(client, auth, open_and_done):
    # OpenWrt starts its clock from the newest file's time under /etc until NTP steps it.
    _, running = open_and_done
    with db.connected():
        assert note_boot(db.database.obj, current="next-boot", now=running - 86400) == 1
    lost = runs(client, auth)[running]
    assert lost["finished_at"] == lost["accepted_at"] == running


def test_the_first_boot_seen_closes_nothing(client, auth, open_and_done):
    _, running = open_and_done
    with db.connected(), db.write_transaction():
        HostBoot.delete().execute()  # a database upgraded from before boots were kept
    with db.connected():
        assert note_boot(db.database.obj, current="some-boot") == 0
    assert runs(client, auth)[running]["state"] == "running"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_health_no_longer_calls_the_cron_running_after_a_reboot(client, auth, open_and_done):
    from qlshadow.watch.health import read_all
    _, running = open_and_done
    with db.connected():
        assert read_all(running + 30)[0]["state"] == "running"
        note_boot(db.database.obj, current="next-boot", now=running + 40)
        assert read_all(running + 50)[0]["state"] == "ok"


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_on_postgresql_a_new_boot_closes_only_this_hosts_runs(client, auth, settings,
                                                              make_settings, open_and_done):
    from helpers import SHADOW_ON
    from qlshadow.web.views import create_app
    _, running = open_and_done
    # Another host of the fleet runs the same cron on the same database, still running.
    other = create_app(make_settings(QL_HOST_NAME="other-host", **SHADOW_ON))
    fire(other.test_client(), auth, table_rows(Cron)[0]["id"], running + 59, finish=False)
    with db.connected():
        assert note_boot(db.database.obj, current="next-boot", now=running + 7200,
                         host=settings.host_name) == 1
    states = {at: (run["state"], run["host"]) for at, run in runs(client, auth).items()}
    assert states[running] == ("exited", settings.host_name)
    assert states[running + 60] == ("running", "other-host")
    assert table_rows(Cron)[0]["status"] == CRON_RUNNING  # the other host's instance is open
    rows = {r["host"]: r["boot_id"] for r in table_rows(HostBoot, HostBoot.host)}
    assert rows[settings.host_name] == "next-boot"


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_on_postgresql_a_host_never_seen_in_the_fleet_closes_no_run(client, auth, open_and_done):
    _, running = open_and_done
    with db.connected():
        note_boot(db.database.obj, current="a-boot", host="stranger")
        assert note_boot(db.database.obj, current="next-boot", now=running + 7200,
                         host="stranger") == 0
    assert runs(client, auth)[running]["state"] == "running"
    assert table_rows(Cron)[0]["status"] == CRON_RUNNING
