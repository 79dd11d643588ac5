"""The files task.sh and the notify tick read in the data dir, all 0600, and the runner token.

Secrets stay off the crontab line: what task.sh needs besides the cron's own fields
(service URL, the qlshadow command, the timeout) is in $QL_DATA_DIR/runner.env, and what
the qlshadow command needs to reach the database is in runner.conf; notify.conf holds the
settings of the block's tick line.
"""
from __future__ import annotations

import os
import shlex
import sys

from qlshadow.host.crontab.data_dir import (absolute_db_url, protect_data_dir, real_data_dir,
                                            write_if_changed)
from qlshadow.host.crontab.errors import CrontabError
from qlshadow.host.crontab.stored import issue_runner_token

RUNNER_ENV = "runner.env"
RUNNER_CONF = "runner.conf"
# The settings of the block's `qlshadow notify` line: the database, Shadow's origins, the
# retention and the notification channels as the server sees them (0600, like runner.conf).
NOTIFY_CONF = "notify.conf"


def base_url(settings) -> str:
    """The URL task.sh calls (QL_BASE_URL, else the listen address; see config)."""
    return settings.base_url


def cli_command() -> str:
    """A shell command line that runs this installation's `qlshadow`, by absolute path."""
    script = os.path.join(os.path.dirname(sys.executable), "qlshadow")
    if os.path.isfile(script) and os.access(script, os.X_OK):
        return shlex.quote(script)
    # No console script next to the interpreter: run the installed package as a module.
    return f"{shlex.quote(sys.executable)} -m qlshadow.cli"


def _one_line(key: str, value: str) -> str:
    if "\n" in value or "\r" in value:
        raise CrontabError(f"{key} holds a line break; task runs cannot be configured")
    return value


def prepare_runner(settings) -> None:
    """Write runner.env, runner.conf and a valid runner token for task.sh (all 0600).

    runner.env holds what task.sh reads (service URL, qlshadow command, callback
    timeout) and, when set, the paths ql-task.sh reads; runner.conf is a config file for
    `qlshadow token runner`, so the database URL reaches that command without being on a
    crontab line or in a task's environment.
    """
    data = real_data_dir(settings)
    timeout = getattr(settings, "callback_timeout", None) or 5
    shell_env = (f"ql_base_url={_one_line('QL_BASE_URL', base_url(settings))}\n"
                 f"ql_cli={_one_line('the qlshadow command', cli_command())}\n"
                 f"ql_timeout={int(timeout) if float(timeout) >= 1 else 1}\n")
    # QingLong's `task` runner (shell/ql-task.sh) reads these when the task's environment
    # has none: crond gives it almost none. Real paths, so a later cd changes nothing.
    for name, key, value in (("ql_scripts_dir", "QL_SCRIPTS_DIR", "scripts_dir"),
                             ("ql_notify_file", "QL_NOTIFY_FILE", "notify_file"),
                             ("ql_env_file", "QL_ENV_FILE", "env_file")):
        if getattr(settings, value, None):
            shell_env += f"{name}={_one_line(key, os.path.realpath(getattr(settings, value)))}\n"
    conf = "".join(f'{key}="{_one_line(key, value)}"\n' for key, value in (
        ("QL_DATA_DIR", data), ("QL_DB_URL", absolute_db_url(settings.db_url)),
        ("QL_DB_TIMEOUT", str(settings.db_timeout))))
    try:
        os.makedirs(data, mode=0o700, exist_ok=True)
        protect_data_dir(settings)
        for name, text in ((RUNNER_CONF, conf), (RUNNER_ENV, shell_env)):
            write_if_changed(os.path.join(data, name), text)
        if not os.path.exists(os.path.join(data, NOTIFY_CONF)):
            write_notify_conf(settings)  # the server's start writes it again with its own
    except OSError as exc:
        raise CrontabError(f"cannot write the task files in {data}: {exc.strerror or exc}") from None
    issue_runner_token(data)


def notify_conf_text(settings, environ=None) -> str:
    """The text of notify.conf: what `qlshadow notify` needs, as this process sees it.

    The channels' variables come from the conf file and the environment (watch/notify/'s
    rule: the environment wins), so a channel set only in the service's environment
    reaches the tick that crond starts with almost no environment.
    """
    from qlshadow.config import NOTIFY_MULTILINE_KEYS, notify_settings
    pairs = [("QL_DATA_DIR", real_data_dir(settings)),
             ("QL_DB_URL", absolute_db_url(settings.db_url)),
             ("QL_DB_TIMEOUT", str(settings.db_timeout)),
             ("QL3_SHADOW_ORIGINS", ",".join(sorted(settings.shadow_origins))),
             ("QL_RETENTION_DAYS", str(settings.retention_days)),
             ("QL_LANG", settings.lang),
             ("QL_HOST_NAME", settings.host_name)]
    for key, value in sorted(notify_settings(environ, settings.config_file, ql_file=False).items()):
        if key in NOTIFY_MULTILINE_KEYS:
            value = value.replace("\r\n", "\n").replace("\n", "\\n")
        if "\n" in value or "\r" in value:
            continue  # a KEY=VALUE line cannot hold it; notify --test names the channel
        pairs.append((key, value))
    return "".join(f'{key}="{value}"\n' for key, value in pairs)


def write_notify_conf(settings, environ=None) -> None:
    """Write notify.conf in the data dir (0600) if its text changed."""
    path = os.path.join(real_data_dir(settings), NOTIFY_CONF)
    write_if_changed(path, notify_conf_text(settings, environ))
