"""The content of our block: a header, one line per cron of this host ordered by id, and the
tick line that runs shell/tick.sh every minute."""
from __future__ import annotations

import os
import shlex

from qlshadow.files import make_private
from qlshadow.host.crontab.data_dir import real_data_dir
from qlshadow.host.crontab.errors import CrontabError
from qlshadow.host.crontab.line import MAX_COMMAND_BYTES, line, needs_escape, shell_dir
from qlshadow.host.crontab.runner_files import NOTIFY_CONF
from qlshadow.host.crontab.stored import in_a_fleet

# BusyBox crond reads at most 255 lines of a non-root user's crontab and drops the rest.
MAX_LINES_NON_ROOT = 255
HEADER_SYSTEM = ("# qlshadow crontab (system mode): generated from the database; "
                 "edits are overwritten")
HEADER_NODE = "# qlshadow crontab (node mode): every line is a comment, nothing is installed"
NOTIFY_UNAVAILABLE = ("# qlshadow notify: the path of tick.sh or of the data dir cannot sit on a "
                      "crontab line; run `qlshadow notify` every minute yourself")
NO_CHANNEL = ("# qlshadow tick: no notification channel is configured, so nothing runs every "
              "minute; set one and restart the service (docs/ALERTS.md)")
# Notification variables that configure no channel by themselves.
_NOT_CHANNELS = frozenset({"QL_NOTIFY_TIMEOUT", "QL_NOTIFY_FILE", "SKIP_PUSH_TITLE"})


def channels_configured(settings) -> bool:
    """True when notify.conf (what the server wrote) or the QL_NOTIFY_FILE it names sets a
    channel's variable. Unreadable settings count as set: the tick then says what is wrong."""
    from qlshadow.config import notify_sources
    conf = os.path.join(real_data_dir(settings), NOTIFY_CONF)
    if not os.path.isfile(conf):
        return False
    make_private(conf)  # it holds channel secrets: 0600 again if someone loosened it
    try:
        values = notify_sources(environ={}, config_file=conf).values
    except (OSError, ValueError):
        return True
    return any(value.strip() for key, value in values.items() if key not in _NOT_CHANNELS)


def notify_line(settings, fleet: bool = False) -> str:
    """The block's own line: shell/tick.sh every minute, which asks the running service to
    tick and starts `qlshadow notify` only when it does not answer (watch/alerts/, watch/outage.py),
    so crond is the only clock. With no channel configured a comment (nothing runs),
    except on a host of a fleet (its tick records it and installs its block); in node mode
    a comment, like every line."""
    if not fleet and not channels_configured(settings):
        return NO_CHANNEL
    data = real_data_dir(settings)
    script = os.path.join(shell_dir(), "tick.sh")
    if needs_escape(data) or needs_escape(script) or any(c.isspace() for c in script):
        return NOTIFY_UNAVAILABLE
    command = f"QL_DATA_DIR={shlex.quote(data)} {script}"
    if len(command.encode("utf-8")) > MAX_COMMAND_BYTES:
        return NOTIFY_UNAVAILABLE
    text = f"* * * * * {command}"
    return text if settings.scheduler == "system" else "# " + text


def render_rows(settings, rows: list) -> tuple:
    """(text, active lines) of our block's content for these cron rows.

    Active lines count the crons only: the notify line alone installs no block.
    """
    scripts = shell_dir()
    header = HEADER_SYSTEM if settings.scheduler == "system" else HEADER_NODE
    from qlshadow.core.fleet import runs_on
    # Only the crons that name this host: the others run elsewhere in the fleet.
    lines = [line(settings, cron, scripts) for cron in rows if runs_on(cron, settings.host_name)]
    active = sum(1 for text in lines if not text.startswith("#"))
    from qlshadow.config import sqlite_file
    tick = notify_line(settings)
    # A host of a fleet (several hosts on one PostgreSQL database) keeps its tick line
    # installed, with no channel and no cron of its own: its tick is how it hears of a cron
    # named for it later (the database is asked only when that changes the block).
    if (tick == NO_CHANNEL or not active) and sqlite_file(settings.db_url) is None \
            and in_a_fleet():
        tick = notify_line(settings, fleet=True)
        if not tick.startswith("#"):
            active = max(active, 1)
    if active + 1 > MAX_LINES_NON_ROOT and os.geteuid() != 0:
        raise CrontabError(f"{active} active crons and the notify line: BusyBox crond reads "
                           f"only the first {MAX_LINES_NON_ROOT} lines of a non-root user's "
                           "crontab")
    return "".join(f"{text}\n" for text in [header] + lines + [tick]), active
