"""Settings from the environment over a KEY=VALUE config file, checked in one pass."""
from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import replace

from qlshadow.config.errors import ConfigError
from qlshadow.config.keys import (FILE_KEYS, NOTIFY_KEYS, NOTIFY_UNUSED_KEYS, SCHEDULERS,
                                  SQLITE_SYNCHRONOUS)
from qlshadow.config.settings import DEFAULT_BUDGET_TEXT, Settings, default_threads
from qlshadow.config.values import (_int, check_base_url, check_db_url, check_host_name, check_hosts,
                                    check_path, crontab_commands, derive_base_url, parse_float,
                                    parse_lang, parse_origins, parse_page_hosts, parse_size,
                                    system_host_name)


def read_config_file(path: str) -> dict:
    """Read a KEY=VALUE file: '#' comments, blank lines, optional matching quotes."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    values = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[7:].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{path}:{number}: expected KEY=VALUE")
        if key not in FILE_KEYS and key not in NOTIFY_KEYS and key not in NOTIFY_UNUSED_KEYS:
            raise ConfigError(f"{path}:{number}: unknown key {key}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = value
    return values


def language(environ: Mapping[str, str] | None = None, config_file: str | None = None) -> str:
    """QL_LANG alone (the environment over the config file), for `notify --test`, which
    reads no other setting of the service."""
    env = os.environ if environ is None else environ
    path = config_file or env.get("QL_CONFIG") or None
    raw = env.get("QL_LANG")
    if raw is None:
        raw = (read_config_file(path) if path else {}).get("QL_LANG", "en")
    return parse_lang(raw)


def _detect_scheduler() -> str:
    return "system" if (shutil.which("crond") or shutil.which("cron")) else "node"


def load(environ: Mapping[str, str] | None = None, config_file: str | None = None) -> Settings:
    """Build Settings from a config file (optional) overlaid by the environment."""
    env = dict(os.environ if environ is None else environ)
    path = config_file or env.get("QL_CONFIG") or None
    file_values = read_config_file(path) if path else {}
    from_env = {k: v for k, v in env.items() if k.startswith(("QL_", "QL3_"))}
    merged = {**file_values, **from_env}

    data_dir = merged.get("QL_DATA_DIR", "./data").strip()
    if not data_dir:
        raise ConfigError("QL_DATA_DIR must not be empty")
    data_dir = data_dir.rstrip("/") or "/"
    db_url = check_db_url(merged.get("QL_DB_URL", "").strip() or f"sqlite:///{data_dir}/qlshadow.db")

    hosts = check_hosts(merged.get("QL_HOST", "127.0.0.1"))
    host = hosts[0]
    port = _int("QL_PORT", merged.get("QL_PORT", "5600"), 0, 65535)
    base_url = merged.get("QL_BASE_URL", "").strip()
    base_url = check_base_url(base_url) if base_url else derive_base_url(host, port)

    crontab_install, crontab_list = crontab_commands(merged)
    scheduler = merged.get("QL_SCHEDULER", "").strip()
    if scheduler and scheduler not in SCHEDULERS:
        raise ConfigError(f"QL_SCHEDULER={scheduler!r} must be 'system' or 'node'")

    synchronous = merged.get("QL_SQLITE_SYNCHRONOUS", "full").strip()
    if synchronous not in SQLITE_SYNCHRONOUS:
        raise ConfigError(f"QL_SQLITE_SYNCHRONOUS={merged['QL_SQLITE_SYNCHRONOUS']!r} "
                          "must be 'full' or 'normal'")

    return Settings(
        data_dir=data_dir,
        db_url=db_url,
        host=host,
        hosts=hosts,
        port=port,
        threads=_int("QL_THREADS", merged.get("QL_THREADS", default_threads(db_url)), 1, 64),
        scheduler=scheduler or _detect_scheduler(),
        crontab_file=merged.get("QL_CRONTAB_FILE", "").strip() or os.path.join(data_dir, "crontab.list"),
        crontab_install=crontab_install,
        crontab_list=crontab_list,
        shadow_origins=parse_origins(merged.get("QL3_SHADOW_ORIGINS", "")),
        failure_cap=_int("QL3_SHADOW_FAILURE_CAP", merged.get("QL3_SHADOW_FAILURE_CAP", "1000"),
                         0, 10_000_000),
        max_body=_int("QL_MAX_BODY", merged.get("QL_MAX_BODY", "65536"), 256, 16 * 1024 * 1024),
        db_timeout=parse_float("QL_DB_TIMEOUT", merged.get("QL_DB_TIMEOUT", "5"), 0.1, 300),
        sqlite_synchronous=synchronous,
        base_url=base_url,
        callback_timeout=_int("QL_CALLBACK_TIMEOUT", merged.get("QL_CALLBACK_TIMEOUT", "5"), 1, 300),
        retention_days=_int("QL_RETENTION_DAYS", merged.get("QL_RETENTION_DAYS", "30"), 0, 36500),
        retention_rows_per_cron=_int("QL_RETENTION_ROWS_PER_CRON",
                                     merged.get("QL_RETENTION_ROWS_PER_CRON", "1000"), 0, 10_000_000),
        retention_logs_per_cron=_int("QL_RETENTION_LOGS_PER_CRON",
                                     merged.get("QL_RETENTION_LOGS_PER_CRON", "50"), 0, 10_000_000),
        retention_log_days=_int("QL_RETENTION_LOG_DAYS", merged.get("QL_RETENTION_LOG_DAYS", "7"), 0, 36500),
        storage_budget=parse_size("QL_STORAGE_BUDGET",
                                  merged.get("QL_STORAGE_BUDGET", DEFAULT_BUDGET_TEXT)),
        page_hosts=parse_page_hosts(merged.get("QL_PAGE_HOSTS", "")),
        scripts_dir=check_path("QL_SCRIPTS_DIR", merged.get("QL_SCRIPTS_DIR", "")),
        env_file=check_path("QL_ENV_FILE", merged.get("QL_ENV_FILE", "")),
        # Relative is allowed here as notify_sources allows it (an absolute path from the cwd).
        notify_file=check_path("QL_NOTIFY_FILE", merged.get("QL_NOTIFY_FILE", ""), absolute=False),
        lang=parse_lang(merged.get("QL_LANG", "en")),
        host_name=check_host_name(merged.get("QL_HOST_NAME", "").strip() or system_host_name()),
        config_file=path,
        file_keys=frozenset(file_values.keys() - from_env.keys()),
        given_keys=frozenset(merged),
    )


def with_port(settings: Settings, port: int) -> Settings:
    """Settings for the port actually bound (QL_PORT=0 picks one); a derived base URL follows."""
    base_url = settings.base_url
    if base_url == derive_base_url(settings.host, settings.port):
        base_url = derive_base_url(settings.host, port)
    return replace(settings, port=port, base_url=base_url)
