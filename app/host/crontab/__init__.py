"""Our block of the user's crontab (docs/CONTRACT.md) and the files a task run reads.

One line per cron, ordered by id, between `# BEGIN qlshadow <data dir>` and
`# END qlshadow <data dir>`; every other line of the crontab is the user's and kept byte
for byte. Every data dir installing into one crontab does so under one lock. A cron change
is kept only when its install succeeds (service/cron_change.py).

The parts, lowest first:
  errors        CrontabError and CronTooLong
  data_dir      the data dir's real path, files rewritten only on a change, its modes
  line          one cron's line: its environment, escaping, the length check
  stored        the database reads and the runner token (the only use of storage here)
  runner_files  runner.env, runner.conf, notify.conf
  content       the block's content: header, cron lines, tick line
  block         the markers and the crontab text with our block replaced
  recorded      the server's recorded install settings, compared with a command's
  state         the outcome of the last install (install_state)
  lock          the data dir's and the crontab's locks
  install       reading and installing by subprocess, read back and retried; put
  syncing       render from the database, sync and remove

This module names what the rest of qlshadow uses; inside the package each part imports
from the part that holds the name.
"""
from __future__ import annotations

from qlshadow.host.crontab.block import markers, old_whole_crontab_lines
from qlshadow.host.crontab.content import NO_CHANNEL, notify_line, render_rows
from qlshadow.host.crontab.data_dir import protect_data_dir, real_data_dir
from qlshadow.host.crontab.errors import CronTooLong, CrontabError
from qlshadow.host.crontab.install import install_bytes, put, read_crontab
from qlshadow.host.crontab.line import (MAX_COMMAND_BYTES, check_cron, needs_escape,
                                        shell_dir, shell_word, task_env)
from qlshadow.host.crontab.lock import LOCK_DIRS, Lock, lock_path
from qlshadow.host.crontab.recorded import RECORD, check_installer, record_settings, settings_to_adopt
from qlshadow.host.crontab.runner_files import (NOTIFY_CONF, RUNNER_CONF, RUNNER_ENV, cli_command,
                                                notify_conf_text, prepare_runner,
                                                write_notify_conf)
from qlshadow.host.crontab.state import (install_failed, install_state, installed_file,
                                         note_state, state_file)
from qlshadow.host.crontab.stored import stored_crons
from qlshadow.host.crontab.syncing import remove, render, sync, sync_locked

__all__ = [
    "LOCK_DIRS", "MAX_COMMAND_BYTES", "NOTIFY_CONF", "NO_CHANNEL", "RECORD", "RUNNER_CONF",
    "RUNNER_ENV", "CronTooLong", "CrontabError", "Lock", "check_cron", "check_installer",
    "cli_command", "install_bytes", "install_failed", "install_state", "installed_file",
    "lock_path", "markers", "needs_escape", "note_state", "notify_conf_text", "notify_line",
    "old_whole_crontab_lines", "prepare_runner", "protect_data_dir", "put", "read_crontab",
    "real_data_dir", "record_settings", "remove", "render", "render_rows", "settings_to_adopt",
    "shell_dir", "shell_word", "state_file", "stored_crons", "sync", "sync_locked", "task_env",
    "write_notify_conf",
]
