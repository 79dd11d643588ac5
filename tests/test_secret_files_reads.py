"""Secret files the data dir holds are 0600 again after what reads them, beyond the token
commands and start-up of test_secret_files: notify.conf, which a cron change reads (whether
the crontab needs its tick line) and the service's tick reads every minute, and the
server's install record, which every CLI command reads. Both databases; the cron changes
install into a real BusyBox spool."""
from __future__ import annotations

import json
import os
import stat

import pytest

from qlshadow.host import crontab
from qlshadow.watch import service_tick
from test_crontab_block import busybox_target  # noqa: F401  (a fixture)
from test_crontab_shared import DataDir, database_url, lock_files  # noqa: F401


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def data(busybox_target, database_url, lock_files, tmp_path):  # noqa: F811
    made = DataDir(str(tmp_path / "d1"), database_url("d1"), busybox_target, lock_files)
    made.cli("cron", "add", "*/5 * * * *", "echo first")
    return made


def _loosened_notify_conf(settings) -> str:
    crontab.write_notify_conf(settings, environ={"NTFY_TOPIC": "ops", "NTFY_TOKEN": "tk_x"})
    path = os.path.join(settings.data_dir, crontab.NOTIFY_CONF)
    os.chmod(path, 0o644)
    return path


def test_the_service_tick_makes_a_loosened_notify_conf_0600_again(data):
    settings = data.settings()
    path = _loosened_notify_conf(settings)
    [channel] = service_tick.channels_for(settings)
    assert channel.name == "ntfy"
    assert _mode(path) == 0o600


def test_a_cron_change_makes_a_loosened_notify_conf_0600_again(data):
    path = _loosened_notify_conf(data.settings())
    data.cli("cron", "add", "*/10 * * * *", "echo second")
    assert _mode(path) == 0o600


def test_a_cli_command_makes_a_loosened_install_record_0600_again(data):
    crontab.record_settings(data.settings())
    path = os.path.join(data.path, crontab.RECORD)
    with open(path) as fh:
        assert json.load(fh)["QL_SCHEDULER"] == "system"
    os.chmod(path, 0o644)
    data.cli("cron", "list")
    assert _mode(path) == 0o600
