"""The procd init script (conf/qlshadow.init, CONTRACT.md §14): start_service and
service_triggers run under BusyBox ash, dash and bash against stand-ins for rc.common's UCI
helpers and procd's shell API (tests/openwrt.py). Every service setting has a UCI option
that reaches the environment; a bad value is one log line and no start, with the same
bounds as the service's own parser; an interface's addresses become listen addresses; a
data dir on an unmounted disk waits for its mount trigger."""
from __future__ import annotations

import os

import pytest

from qlshadow import config
from helpers import LiveServer, http
from openwrt import SHELLS, UCI, environment, init_options, params, procd_calls

CONF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf",
                    "qlshadow.conf")

# A valid value of every UCI option that maps to a setting.
SAMPLES = {
    "data_dir": "/mnt/usb/ql", "db_url": "sqlite:////mnt/usb/ql/q.db", "host": "127.0.0.1",
    "port": "5601", "threads": "3", "scheduler": "node", "crontab_file": "/mnt/usb/ql/c.list",
    "crontab_install": "crontab -c /etc/crontabs {file}",
    "crontab_list": "crontab -c /etc/crontabs -l", "base_url": "http://127.0.0.1:5601",
    "page_hosts": "router.example.org,nas.lan", "lang": "zh_CN", "host_name": "router-1",
    "callback_timeout": "7", "db_timeout": "2.5", "sqlite_synchronous": "normal",
    "max_body": "4096", "retention_days": "10", "retention_rows_per_cron": "20",
    "retention_logs_per_cron": "5", "retention_log_days": "3", "storage_budget": "4M",
    "shadow_origins": "scheduled_system,manual", "shadow_failure_cap": "50",
    "scripts_dir": "/mnt/usb/ql/scripts", "env_file": "/mnt/usb/ql/env.sh",
}


@pytest.mark.parametrize("shell", SHELLS)
def test_it_runs_serve_with_the_conf_file_named_in_uci(shell):
    calls = procd_calls(shell)

    assert calls[:2] == ["config_load qlshadow", "open_instance"]
    assert "close_instance" in calls
    assert params(calls, "command") == [["/usr/bin/qlshadow", "--config", CONF, "serve"]]


def test_it_passes_no_environment_when_uci_sets_nothing_but_the_defaults():
    assert params(procd_calls(), "env") == []


def test_every_setting_of_the_service_has_a_uci_option():
    settings, _ = init_options()

    assert set(settings.values()) == set(config.FILE_KEYS)
    assert set(SAMPLES) == set(settings)


@pytest.mark.parametrize("shell", SHELLS)
def test_every_uci_option_reaches_the_environment_and_the_service_takes_it(shell):
    settings, _ = init_options()

    env = environment(procd_calls(shell, **SAMPLES))

    assert env == {settings[option]: value for option, value in SAMPLES.items()}
    loaded = config.load(environ=env)
    assert (loaded.port, loaded.threads, loaded.db_timeout, loaded.storage_budget) == (
        5601, 3, 2.5, 4 * 1024 * 1024)


def test_empty_options_are_left_to_the_conf_file():
    calls = procd_calls(port="5601", db_url="", host="")

    assert params(calls, "env") == [["QL_PORT=5601"]]


def test_the_uci_file_documents_every_option_with_its_default():
    _, checks = init_options()
    with open(UCI, encoding="utf-8") as fh:
        text = fh.read()

    documented = {line.split()[1] for line in text.splitlines()
                  if line.strip().lstrip("#").startswith("option ")}
    assert documented == set(checks)


# A bad value per kind of check, and the setting the service would have refused it as.
BAD = [
    ("port", "70000"), ("port", "80a"), ("threads", "0"), ("threads", "65"),
    ("scheduler", "cron"), ("sqlite_synchronous", "off"), ("db_timeout", "0.05"),
    ("db_timeout", "soon"), ("storage_budget", "6MB"), ("shadow_origins", "scheduled_sytem"),
    ("db_url", "sqlite://q.db"), ("db_url", "mysql://x"), ("base_url", "ftp://x"),
    ("base_url", "http://h/a b"), ("host", "a b"), ("max_body", "100"),
    ("callback_timeout", "301"), ("retention_days", "-1"), ("shadow_failure_cap", "x"),
    ("page_hosts", "https://router.lan"),
    ("scripts_dir", "scripts"), ("env_file", "ql/env.sh"),
    ("page_hosts", "https://router.lan"), ("lang", "zh"), ("lang", "zh-CN"),
]


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("option,value", BAD, ids=[f"{o}={v}" for o, v in BAD])
def test_a_bad_value_is_one_log_line_and_no_start(shell, option, value):
    settings, _ = init_options()

    calls = procd_calls(shell, **{option: value})

    logged = [line for line in calls if line.startswith("logger")]
    assert len(logged) == 1
    assert f"qlshadow.main.{option}='{value}'" in logged[0] and "not started" in logged[0]
    assert "open_instance" not in calls
    with pytest.raises(config.ConfigError):
        config.load(environ={settings[option]: value})


@pytest.mark.parametrize("option,value", [("enabled", "maybe"), ("conf_file", "/nonexistent"),
                                          ("respawn_retry", "x"), ("interface", "lan 2")])
def test_a_bad_value_of_the_scripts_own_options_is_one_log_line_and_no_start(option, value):
    calls = procd_calls(**{option: value})

    assert len([line for line in calls if line.startswith("logger")]) == 1
    assert "open_instance" not in calls


def int_bounds() -> list:
    settings, checks = init_options()
    found = []
    for option, check in checks.items():
        if option in settings and check.startswith("int,"):
            low, high = (int(n) for n in check.split(",")[1:])
            found.append((option, settings[option], low, high))
    return found


@pytest.mark.parametrize("option,setting,low,high", int_bounds(),
                         ids=[b[0] for b in int_bounds()])
def test_the_script_and_the_service_agree_on_every_bound(option, setting, low, high):
    for value, good in ((low, True), (high, True), (high + 1, False)) + (
            ((low - 1, False),) if low > 0 else ()):
        calls = procd_calls(**{option: str(value)})
        try:
            config.load(environ={setting: str(value)})
            service_takes = True
        except config.ConfigError:
            service_takes = False
        assert ("open_instance" in calls) is good is service_takes, (option, value)


def test_it_respawns_and_sends_output_to_syslog():
    calls = procd_calls()

    assert params(calls, "respawn") == [["3600", "5", "5"]]
    assert params(calls, "stdout") == [["1"]]
    assert params(calls, "stderr") == [["1"]]


def test_reload_restarts_it_when_the_uci_or_conf_file_changed():
    calls = procd_calls()

    assert params(calls, "file") == [["/etc/config/qlshadow", CONF]]
    assert "reload_trigger qlshadow" in calls


def test_it_starts_nothing_when_disabled_in_uci():
    calls = procd_calls(enabled="0")

    assert "open_instance" not in calls
    assert "reload_trigger qlshadow" in calls


@pytest.mark.parametrize("shell", SHELLS)
def test_a_package_upgrade_starts_it_only_when_enabled(shell):
    disabled = procd_calls(shell, env={"PKG_UPGRADE": "1", "ENABLED": "0"})
    enabled = procd_calls(shell, env={"PKG_UPGRADE": "1", "ENABLED": "1"})
    by_hand = procd_calls(shell, env={"ENABLED": "0"})

    assert "open_instance" not in disabled
    assert "open_instance" in enabled and "open_instance" in by_hand


# --- interface ------------------------------------------------------------------------------

@pytest.mark.parametrize("shell", SHELLS)
def test_an_interface_adds_its_addresses_after_loopback_and_reloads_on_its_events(shell):
    calls = procd_calls(shell, env={"NET4": "192.168.1.1", "NET6": "fd00::1"}, interface="lan")

    assert environment(calls)["QL_HOST"] == "127.0.0.1,192.168.1.1,fd00::1"
    assert "interface_trigger lan" in calls


def test_an_interface_with_an_empty_host_listens_on_loopback_first():
    calls = procd_calls(env={"NET4": "192.168.1.1"}, interface="lan", host="")

    assert environment(calls)["QL_HOST"] == "127.0.0.1,192.168.1.1"


def test_an_interface_without_an_address_keeps_loopback_and_says_so():
    calls = procd_calls(env={"NET4": "", "NET6": ""}, interface="wan", host="::1")

    assert environment(calls)["QL_HOST"] == "::1"
    assert "open_instance" in calls
    assert any(line.startswith("logger") and "wan has no address" in line for line in calls)


def test_the_service_listens_on_every_address_the_interface_gives(tmp_path):
    calls = procd_calls(env={"NET4": "127.0.0.2", "NET6": ""}, interface="lan")
    server = LiveServer({"QL_DATA_DIR": str(tmp_path / "data"), "QL_SCHEDULER": "node",
                         "QL_CRONTAB_INSTALL": "", "QL_HOST": environment(calls)["QL_HOST"]})
    try:
        answers = [http("GET", f"http://{address}:{server.port}/health")[0]
                   for address in ("127.0.0.1", "127.0.0.2")]
    finally:
        server.stop()

    assert answers == [200, 200]
    assert f"qlshadow serving http://127.0.0.1:{server.port} http://127.0.0.2:{server.port} " \
        in server.output()


# --- a data dir on a disk that is mounted later ----------------------------------------------

@pytest.mark.parametrize("shell", SHELLS)
def test_a_data_dir_on_an_unmounted_disk_waits_for_its_mount_trigger(shell):
    calls = procd_calls(shell, env={"FSTAB_MOUNT": "/mnt/ql-test-absent"},
                        data_dir="/mnt/ql-test-absent/qlshadow")

    assert "open_instance" not in calls
    assert [line for line in calls if line.startswith("logger")] == [
        "logger -t qlshadow -p daemon.notice data dir /mnt/ql-test-absent/qlshadow: "
        "waiting for /mnt/ql-test-absent to be mounted"]
    assert "mount_trigger /mnt/ql-test-absent/qlshadow" in calls


def test_a_data_dir_on_a_mounted_file_system_starts_at_once():
    # /proc is mounted on every Linux box: it stands for a USB disk already mounted.
    calls = procd_calls(env={"FSTAB_MOUNT": "/proc"}, data_dir="/proc/qlshadow")

    assert "open_instance" in calls
    assert "mount_trigger /proc/qlshadow" in calls


def test_the_mount_trigger_follows_the_data_dir_of_the_conf_file(tmp_path):
    conf = tmp_path / "qlshadow.conf"
    conf.write_text("# data on USB\nQL_DATA_DIR = '/mnt/sda1/ql'\n")

    calls = procd_calls(conf_file=str(conf))

    assert "mount_trigger /mnt/sda1/ql" in calls
