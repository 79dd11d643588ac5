"""Configuration (CONTRACT.md §1): defaults, the config file under the environment, strict
values that stop the real command with one line naming the key; and the SQLite pragmas."""
from __future__ import annotations

import os
import sqlite3
import stat
import threading

import pytest

from qlshadow import config
from qlshadow.storage import db
from qlshadow.config import ConfigError
from helpers import run_cli


def test_the_defaults_are_those_of_the_contract():
    settings = config.load(environ={"QL_SCHEDULER": "node"})

    assert (settings.data_dir, settings.db_url, settings.host, settings.port, settings.threads) == (
        "./data", "sqlite:///./data/qlshadow.db", "127.0.0.1", 5600, 2)
    assert (settings.crontab_file, settings.crontab_install) == ("./data/crontab.list", "crontab {file}")
    assert (settings.shadow_origins, settings.failure_cap, settings.max_body) == (frozenset(), 1000, 65536)
    assert settings.shadow_on is False
    assert settings.token_file == "./data/token.json"


@pytest.mark.parametrize("url, threads", [
    ("sqlite:////srv/ql/q.db", 2), ("postgresql://ql@db.lan/ql", 4), ("postgres://ql@db.lan/ql", 4)])
def test_the_default_thread_count_follows_the_database(url, threads):
    # SQLite: callbacks on the loop thread, two workers for the rest; PostgreSQL overlaps
    # round trips.
    assert config.load(environ={"QL_DB_URL": url, "QL_SCHEDULER": "node"}).threads == threads
    assert config.load(environ={"QL_DB_URL": url, "QL_SCHEDULER": "node",
                                "QL_THREADS": "3"}).threads == 3


def test_the_data_dir_moves_the_database_crontab_and_token_file():
    settings = config.load(environ={"QL_DATA_DIR": "/srv/ql/", "QL_SCHEDULER": "node"})

    assert (settings.db_url, settings.crontab_file, settings.token_file) == (
        "sqlite:////srv/ql/qlshadow.db", "/srv/ql/crontab.list", "/srv/ql/token.json")


def _fake_path(tmp_path, monkeypatch, *tools: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        exe = bin_dir / tool
        exe.write_text("#!/bin/sh\n")
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(bin_dir))


@pytest.mark.parametrize("tool", ["crond", "cron"])
def test_the_scheduler_is_system_when_crond_or_cron_is_on_path(tmp_path, monkeypatch, tool):
    _fake_path(tmp_path, monkeypatch, tool)

    assert config.load(environ={}).scheduler == "system"


def test_the_scheduler_is_node_without_crond_on_path(tmp_path, monkeypatch):
    _fake_path(tmp_path, monkeypatch)

    assert config.load(environ={}).scheduler == "node"


def test_an_explicit_scheduler_wins_over_detection(tmp_path, monkeypatch):
    _fake_path(tmp_path, monkeypatch, "crond")

    assert config.load(environ={"QL_SCHEDULER": "node"}).scheduler == "node"


def test_shadow_origins_are_parsed_into_an_immutable_set():
    settings = config.load(environ={"QL3_SHADOW_ORIGINS": " scheduled_system ,manual,,",
                                    "QL_SCHEDULER": "node"})

    assert settings.shadow_origins == frozenset({"scheduled_system", "manual"})
    assert isinstance(settings.shadow_origins, frozenset)
    assert settings.shadow_on is True


def _write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_the_config_file_is_read_with_comments_quotes_and_export(tmp_path):
    path = _write(tmp_path / "ql.conf", "# settings\n\nQL_PORT=7000\nexport QL_THREADS=8\n"
                  "QL_HOST='0.0.0.0'\nQL3_SHADOW_ORIGINS=\"scheduled_system\"\n")

    settings = config.load(environ={"QL_SCHEDULER": "node"}, config_file=path)

    assert (settings.port, settings.threads, settings.host, settings.shadow_origins) == (
        7000, 8, "0.0.0.0", frozenset({"scheduled_system"}))


def test_the_environment_wins_over_the_config_file(tmp_path):
    path = _write(tmp_path / "ql.conf", "QL_PORT=7000\nQL_THREADS=8\n")

    settings = config.load(environ={"QL_PORT": "7001", "QL_SCHEDULER": "node"}, config_file=path)

    assert (settings.port, settings.threads) == (7001, 8)


def test_ql_config_names_the_file_when_no_option_is_given(tmp_path):
    path = _write(tmp_path / "ql.conf", "QL_MAX_BODY=2048\n")

    settings = config.load(environ={"QL_CONFIG": path, "QL_SCHEDULER": "node"})

    assert settings.max_body == 2048


def test_the_real_command_lets_the_environment_win_over_its_config_file(tmp_path):
    good = f"sqlite:///{tmp_path}/good.db"
    path = _write(tmp_path / "ql.conf", f"QL_DB_URL=sqlite://x.db\nQL_DATA_DIR={tmp_path}/data\n")

    result = run_cli({"QL_DB_URL": good, "QL_SCHEDULER": "node"}, "--config", path, "db", "init")

    assert result.returncode == 0
    assert os.path.exists(tmp_path / "good.db")


BAD_VALUES = [
    ("QL_PORT", "abc"), ("QL_PORT", "70000"), ("QL_PORT", "-1"), ("QL_PORT", "80.5"),
    ("QL_DB_URL", "sqlite://x.db"), ("QL_DB_URL", "sqlite:///:memory:"),
    ("QL_DB_URL", "sqlite:///"), ("QL_DB_URL", "mysql://db/ql"), ("QL_DB_URL", "x.db"),
    ("QL3_SHADOW_ORIGINS", "bogus"), ("QL3_SHADOW_ORIGINS", "scheduled_system,Manual"),
    ("QL_THREADS", "0"), ("QL_THREADS", "many"), ("QL_THREADS", "1000"), ("QL_THREADS", ""),
    ("QL_MAX_BODY", "big"), ("QL_MAX_BODY", "-1"), ("QL_MAX_BODY", "1e6"), ("QL_MAX_BODY", "0"),
    ("QL_SCHEDULER", "cron"), ("QL_SCHEDULER", "SYSTEM"),
    ("QL3_SHADOW_FAILURE_CAP", "lots"), ("QL_HOST", "a b"), ("QL_DATA_DIR", " "),
    ("QL_SQLITE_SYNCHRONOUS", "off"), ("QL_SQLITE_SYNCHRONOUS", "FULL"),
    ("QL_SQLITE_SYNCHRONOUS", "1"), ("QL_SQLITE_SYNCHRONOUS", ""),
    ("QL_SCRIPTS_DIR", "scripts"), ("QL_ENV_FILE", "/ql/env\n.sh"), ("QL_NOTIFY_FILE", "a\rb"),
]


@pytest.mark.parametrize("key,value", BAD_VALUES, ids=[f"{k}={v}" for k, v in BAD_VALUES])
def test_a_bad_value_raises_an_error_naming_the_key(key, value):
    with pytest.raises(ConfigError) as error:
        config.load(environ={"QL_SCHEDULER": "node", key: value})

    assert key in str(error.value)
    assert "\n" not in str(error.value)


def _assert_one_line_naming(result, word: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0
    assert len(lines) == 1, result.stderr
    assert word in lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("key,value,command", [
    ("QL_PORT", "abc", "serve"),
    ("QL_DB_URL", "sqlite://x.db", "serve"),
    ("QL3_SHADOW_ORIGINS", "bogus", "serve"),
    ("QL_THREADS", "0", "db init"),
    ("QL_MAX_BODY", "huge", "db init"),
    ("QL_SCHEDULER", "anacron", "db init"),
], ids=lambda v: v.replace(" ", "-") if isinstance(v, str) else v)
def test_a_bad_value_stops_the_real_command_with_one_line_naming_the_key(tmp_path, key, value, command):
    env = {"QL_DATA_DIR": str(tmp_path / "data"), "QL_DB_URL": f"sqlite:///{tmp_path}/data/q.db",
           "QL_PORT": "0", "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": "", key: value}

    result = run_cli(env, *command.split(), check=False)

    _assert_one_line_naming(result, key)
    assert not os.path.exists(tmp_path / "data")


def test_an_unknown_key_in_the_config_file_stops_the_command_naming_it(tmp_path):
    path = _write(tmp_path / "ql.conf", "QL_PORT=5600\nQL_PROT=5601\n")

    result = run_cli({"QL_DATA_DIR": str(tmp_path / "data")}, "--config", path, "db", "init",
                     check=False)

    _assert_one_line_naming(result, "QL_PROT")
    assert "ql.conf:2" in result.stderr


def test_qinglongs_notify_variables_in_the_config_file_never_stop_the_service(tmp_path):
    # Every channel variable of QingLong's notify.py, those qlshadow does not use included:
    # a conf file carried over from QingLong loads as it is.
    path = _write(tmp_path / "ql.conf", "QL_PORT=5600\nDEER_KEY=PDU1\nGOBOT_URL=http://127.0.0.1/x\n"
                  "GOBOT_QQ=user_id=1\nGOBOT_TOKEN=t\nQYWX_AM=a,b,c,d\nHITOKOTO=true\n"
                  "CONSOLE=false\nexport SKIP_PUSH_TITLE='a'\nQL_NOTIFY_FILE=/ql/config.sh\n")

    assert config.load(environ={}, config_file=path).port == 5600
    assert run_cli({"QL_DATA_DIR": str(tmp_path / "data")}, "--config", path, "db", "init",
                   check=False).returncode == 0


def test_a_line_without_equals_in_the_config_file_is_an_error(tmp_path):
    path = _write(tmp_path / "ql.conf", "QL_PORT\n")

    with pytest.raises(ConfigError, match="ql.conf:1"):
        config.load(environ={}, config_file=path)


def test_a_missing_config_file_stops_the_command_with_one_line(tmp_path):
    result = run_cli({"QL_DATA_DIR": str(tmp_path / "data")}, "--config", str(tmp_path / "none.conf"),
                     "db", "init", check=False)

    _assert_one_line_naming(result, "none.conf")


# --- SQLite pragmas -------------------------------------------------------------------------

def _pragma(name: str):
    db.ensure_connection()
    return db.database.execute_sql(f"PRAGMA {name}").fetchone()[0]


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sqlite_runs_in_wal_mode(app, db_url):
    assert _pragma("journal_mode") == "wal"
    with sqlite3.connect(db_url[len("sqlite:///"):]) as other:  # persisted in the file itself
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    other.close()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sqlite_connections_use_synchronous_full_foreign_keys_and_a_busy_timeout(app):
    # synchronous=FULL is 2: every commit is fsynced, so an answered callback survives a cut.
    assert (_pragma("synchronous"), _pragma("foreign_keys"), _pragma("busy_timeout")) == (2, 1, 5000)


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize("shadow_env", [{"QL_SQLITE_SYNCHRONOUS": "normal"}])
def test_ql_sqlite_synchronous_normal_sets_the_pragma_on_every_connection(app):
    assert _pragma("synchronous") == 1


def test_ql_sqlite_synchronous_is_read_from_the_config_file(tmp_path):
    conf = tmp_path / "ql.conf"
    conf.write_text("QL_SQLITE_SYNCHRONOUS=normal\n")

    assert config.load(environ={"QL_SCHEDULER": "node"}).sqlite_synchronous == "full"
    assert config.load(environ={"QL_SCHEDULER": "node"},
                       config_file=str(conf)).sqlite_synchronous == "normal"


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize("shadow_env", [{"QL_DB_TIMEOUT": "2.5"}])
def test_the_busy_timeout_follows_ql_db_timeout(app):
    assert _pragma("busy_timeout") == 2500


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sqlite_keeps_a_small_page_cache(app):
    assert -2048 <= _pragma("cache_size") < 0


@pytest.mark.parametrize("backend", ["sqlite"])
def test_every_thread_gets_the_pragmas_on_its_own_connection(app):
    seen = []

    def worker():
        try:
            seen.append((_pragma("synchronous"), _pragma("foreign_keys"), _pragma("busy_timeout")))
        finally:
            db.discard_connection()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()

    assert seen == [(2, 1, 5000)]
