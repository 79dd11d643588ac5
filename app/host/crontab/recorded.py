"""The settings the server installs with, recorded in the data dir, and how a CLI command's
settings compare with them.

`qlshadow serve` records these in the data dir; a CLI command given the same data dir uses
them for every key its own environment and config file leave unset, so that it installs
exactly where the server does (never with the default into its user's crontab).
"""
from __future__ import annotations

import os

from qlshadow.files import make_private
from qlshadow.host.crontab.data_dir import real_data_dir, write_if_changed
from qlshadow.host.crontab.errors import CrontabError

RECORD = "crontab-settings.json"
# Installing is decided by these together: a command given one of them takes none from
# the record, or it could read one crontab and install into another.
INSTALL_KEYS = ("QL_CRONTAB_INSTALL", "QL_CRONTAB_LIST")
RECORDED_KEYS = ("QL_SCHEDULER", "QL_CRONTAB_FILE", "QL_BASE_URL", "QL_CALLBACK_TIMEOUT",
                 "QL_SCRIPTS_DIR", "QL_NOTIFY_FILE", "QL_ENV_FILE", "QL_HOST_NAME")


def _record_values(settings) -> dict:
    return {"QL_SCHEDULER": settings.scheduler,
            "QL_CRONTAB_FILE": os.path.realpath(settings.crontab_file),
            "QL_CRONTAB_INSTALL": settings.crontab_install,
            "QL_CRONTAB_LIST": settings.crontab_list,
            "QL_BASE_URL": settings.base_url,
            "QL_CALLBACK_TIMEOUT": str(settings.callback_timeout),
            # runner.env's paths for ql-task.sh: a CLI change rewrites runner.env too.
            "QL_SCRIPTS_DIR": _real_or_empty(settings.scripts_dir),
            "QL_NOTIFY_FILE": _real_or_empty(settings.notify_file),
            "QL_ENV_FILE": _real_or_empty(settings.env_file),
            "QL_HOST_NAME": settings.host_name}


def _real_or_empty(path: str | None) -> str:
    return os.path.realpath(path) if path else ""


# The data dirs this process serves (record_settings): a server installs with its own
# settings, which it has just recorded, whatever an older record says.
_SERVED: set = set()


def record_settings(settings) -> None:
    """Record the install settings of this server in the data dir (0600, atomic)."""
    import json
    _SERVED.add(real_data_dir(settings))
    record = dict(_record_values(settings), uid=os.geteuid())
    path = os.path.join(real_data_dir(settings), RECORD)
    try:
        write_if_changed(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    except OSError as exc:
        raise CrontabError(f"cannot write {path}: {exc.strerror or exc}") from None


def recorded_settings(data_dir: str) -> dict | None:
    """What the server last recorded in data_dir, or None (no server started there yet)."""
    import json
    path = os.path.join(os.path.abspath(data_dir), RECORD)
    make_private(path)  # it names the database URL, password and all: 0600 again if loosened
    try:
        with open(path, encoding="utf-8") as fh:
            record = json.load(fh)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def settings_to_adopt(settings) -> dict:
    """The recorded values a CLI command takes: those of keys it was not given."""
    record = recorded_settings(settings.data_dir) or {}
    keys = list(RECORDED_KEYS)
    if not set(INSTALL_KEYS) & settings.given_keys:
        keys += INSTALL_KEYS
    return {key: str(record[key]) for key in keys
            if key in record and key not in settings.given_keys}


def speaks_for_server(settings) -> bool:
    """True when this process installs as the server does: its outcome is the server's."""
    record = recorded_settings(settings.data_dir)
    if record is None:
        return True
    mine = _record_values(settings)
    # The block file by its real path: a data dir reached through a symlink is the server's.
    return (os.path.realpath(str(record.get("QL_CRONTAB_FILE"))) == mine["QL_CRONTAB_FILE"]
            and all(record.get(key) == mine[key] for key in ("QL_SCHEDULER",) + INSTALL_KEYS))


def check_installer(settings) -> None:
    """Refuse to install other than the server does: as another user (`crontab` picks the
    user's own), or with other install settings than the server recorded (the block file
    and /health would describe a crontab crond does not run)."""
    record = recorded_settings(settings.data_dir)
    if record is None or real_data_dir(settings) in _SERVED:
        return
    if (record.get("uid") not in (None, os.geteuid())
            and record.get("QL_CRONTAB_INSTALL") == settings.crontab_install):
        raise CrontabError(f"the server installs the crontab as uid {record['uid']} and this "
                           f"command runs as uid {os.geteuid()}: run it as the server's user "
                           "(or set QL_CRONTAB_INSTALL and QL_CRONTAB_LIST)")
    mine = _record_values(settings)
    differ = [key for key in ("QL_SCHEDULER",) + INSTALL_KEYS + ("QL_CRONTAB_FILE",)
              if key in record and (os.path.realpath(str(record[key])) if key == "QL_CRONTAB_FILE"
                                    else str(record[key])) != mine[key]]
    if differ:
        key = differ[0]
        source = ("the environment" if key in os.environ
                  else settings.config_file or "the environment")
        raise CrontabError(
            f"this command has {key}={mine[key]!r} (from {source}) but the server on "
            f"{real_data_dir(settings)} installs with {key}={str(record[key])!r} (recorded "
            f"by `qlshadow serve` in {RECORD}); unset {key} to install as the server does, "
            "or restart the server with it")
