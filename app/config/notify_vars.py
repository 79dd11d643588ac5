"""The notification variables and where each one came from: the environment, the conf
file, a QingLong config.sh."""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from qlshadow.config.keys import NOTIFY_KEYS, NOTIFY_MULTILINE_KEYS, NOTIFY_UNUSED_KEYS
from qlshadow.config.loading import read_config_file
from qlshadow.config.ql_notify_file import read_ql_notify_file


@dataclass(frozen=True)
class NotifySources:
    """The notification variables, where each one came from (a file's path, or
    ENVIRONMENT), and one warning per line of QL_NOTIFY_FILE that could not be read."""
    values: dict
    origin: dict
    warnings: tuple = ()


ENVIRONMENT = "the environment"


def notify_sources(environ: Mapping[str, str] | None = None, config_file: str | None = None,
                   ql_file: bool = True) -> NotifySources:
    """The notification variables (NOTIFY_KEYS and NOTIFY_UNUSED_KEYS): the environment
    over the conf file over QL_NOTIFY_FILE, read here so the server can hand them to the
    notify tick (notify.conf) without loading the channels.

    The conf file is the one `load` reads (--config, else QL_CONFIG). As in QingLong, an
    empty value counts as unset, so it hides nothing. With ql_file=False QL_NOTIFY_FILE is
    only checked and given as an absolute path (the tick reads it each time: an edit made
    in QingLong's panel reaches the next message without a restart).
    """
    env = os.environ if environ is None else environ
    path = config_file or env.get("QL_CONFIG") or None
    keys = NOTIFY_KEYS | NOTIFY_UNUSED_KEYS
    values: dict = {}
    origin: dict = {}
    for key, value in (read_config_file(path) if path else {}).items():
        if key in keys and value:
            values[key] = value.replace("\\n", "\n") if key in NOTIFY_MULTILINE_KEYS else value
            origin[key] = path
    for key in keys:
        if env.get(key):
            values[key], origin[key] = env[key], ENVIRONMENT
    warnings: tuple = ()
    ql_path = values.get("QL_NOTIFY_FILE", "").strip()
    if ql_path:
        ql_path = values["QL_NOTIFY_FILE"] = os.path.abspath(ql_path)
        found, warnings = read_ql_notify_file(ql_path)
        if ql_file:
            for key, value in found.items():
                if key not in values:
                    values[key], origin[key] = value, ql_path
    return NotifySources(values, origin, warnings)


def notify_settings(environ: Mapping[str, str] | None = None, config_file: str | None = None,
                    ql_file: bool = True) -> dict:
    """The notification variables alone (notify_sources)."""
    return notify_sources(environ, config_file, ql_file).values
