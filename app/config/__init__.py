"""Settings: read once at start-up from the environment (and an optional KEY=VALUE file).

Every value goes through a small strict parser; a bad value raises ConfigError naming the
key, and the service refuses to start instead of silently falling back to a default.

loading.py reads the environment over the conf file and checks every value in one pass
(load), with the parsers in values.py; settings.py holds the Settings object and its
defaults, keys.py the keys and their choices, errors.py ConfigError. The notification
variables are read apart (notify_vars.py), a QingLong config.sh without running it
(ql_notify_file.py).
"""
from qlshadow.config.errors import ConfigError
from qlshadow.config.keys import FILE_KEYS, NOTIFY_KEYS, NOTIFY_MULTILINE_KEYS, NOTIFY_UNUSED_KEYS
from qlshadow.config.loading import language, load, with_port
from qlshadow.config.notify_vars import ENVIRONMENT, NotifySources, notify_settings, notify_sources
from qlshadow.config.ql_notify_file import read_ql_notify_file
from qlshadow.config.settings import Settings
from qlshadow.config.values import (SNAPSHOT_SUFFIX, check_db_url, check_host_name, parse_float,
                                    sqlite_file)

__all__ = ["ENVIRONMENT", "FILE_KEYS", "NOTIFY_KEYS", "NOTIFY_MULTILINE_KEYS", "NOTIFY_UNUSED_KEYS",
           "SNAPSHOT_SUFFIX", "ConfigError", "NotifySources", "Settings", "check_db_url",
           "check_host_name", "language", "load", "notify_settings", "notify_sources",
           "parse_float", "read_ql_notify_file", "sqlite_file", "with_port"]
