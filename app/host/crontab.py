"""Crontab rendering and installation (docs/CONTRACT.md), and the environment of a task run.

One line per cron, ordered by id. In system mode an enabled cron with a 5-field schedule
is an active line whose command carries the origin marker; everything else (disabled,
6-field, extra schedules, @once/@boot, and every line in node mode) is a `# ` comment
without it. The marker is written here and nowhere else.

A line must mean the same to BusyBox crond, Debian's Vixie cron and cronie (measured; see
docs/INSTALL.md): BusyBox ends a line at '#' and joins a line ending in a backslash to the
next; Vixie cron turns '%' into a line break and eats backslashes; Debian's crontab refuses
a command part of 999 bytes or more and then installs nothing at all. So the schedule is
written in the form all of them read alike (schedule.crontab_fields), and every text the
user gave (command, hooks, work dir) and the data dir are written with printf %b octal
escapes for every byte outside a safe set, which task.sh decodes. A cron whose line would
still be too long is refused when it is created or changed (check_cron).

The crontab is the user's: our lines sit in one block between `# BEGIN qlshadow <data dir>`
and `# END qlshadow <data dir>` (its real path), and every other line is kept byte for
byte. Installing reads the crontab (QL_CRONTAB_LIST), replaces our block, installs the
whole text (QL_CRONTAB_INSTALL) and reads it back; with no active line the block is taken
out. Every data dir installing into one crontab does so under one lock (lock_path).
QL_CRONTAB_FILE holds the block's content as last installed. A cron change is kept only
when that install succeeds (service/cron_change.py).

Secrets stay off the line: what task.sh needs besides the cron's own fields (service URL,
the qlshadow command, the timeout) is in $QL_DATA_DIR/runner.env, and what the qlshadow
command needs to reach the database is in runner.conf, both readable by the service's
user only.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

from qlshadow.files import write_private

MARKER = "QL_EXECUTION_ORIGIN=scheduled_system"
INSTALL_TIMEOUT = 30
_LOG_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


class CrontabError(Exception):
    """The crontab could not be written or installed; the message is one sentence."""


def real_data_dir(settings) -> str:
    """The data dir as every crontab line and marker names it: its real path, so that two
    spellings of one dir (a symlink, `..`) find and replace the same block."""
    return os.path.realpath(settings.data_dir)


def shell_dir() -> str:
    """The directory holding task.sh: the source tree's shell/, else the installed copy."""
    # app/host/crontab.py: the source tree's root is three levels up.
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    candidates = (os.path.join(os.path.dirname(package), "shell"),
                  os.path.join(sys.prefix, "share", "qlshadow", "shell"))
    for candidate in candidates:
        if os.path.isfile(os.path.join(candidate, "task.sh")):
            return candidate
    raise CrontabError("task.sh not found in " + " or ".join(candidates))


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


def log_name(cron: dict) -> str:
    """The log folder of a cron: its log_name or name reduced to safe characters."""
    raw = cron.get("log_name") or cron.get("name") or ""
    name = "".join(c if c in _LOG_NAME_CHARS else "_" for c in raw).lstrip(".")[:64]
    return name if any(c.isalnum() for c in name) else f"cron_{cron['id']}"


# The cron's hooks, passed only when set. task.sh decodes these, the data dir and the
# command together when QL_ESCAPED=1, so one flag covers every text a line carries.
HOOKS = (("QL_WORK_DIR", "work_dir"), ("QL_TASK_BEFORE", "task_before"),
         ("QL_TASK_AFTER", "task_after"))
_ENCODED = frozenset(name for name, _ in HOOKS) | {"QL_DATA_DIR"}
# Debian's crontab refuses a command part (all after the five schedule fields) of 999
# bytes or more; BusyBox crond and cronie take longer ones.
MAX_COMMAND_BYTES = 998
# BusyBox crond reads at most 255 lines of a non-root user's crontab and drops the rest.
MAX_LINES_NON_ROOT = 255
RUNNER_ENV = "runner.env"
RUNNER_CONF = "runner.conf"
# The settings of the block's `qlshadow notify` line: the database, Shadow's origins, the
# retention and the notification channels as the server sees them (0600, like runner.conf).
NOTIFY_CONF = "notify.conf"
# Bytes a crontab line carries as they are: printable ASCII except '#' (BusyBox: comment),
# '%' (Vixie: line break) and '\\' (Vixie eats it; BusyBox joins a line ending in one to the
# next). Quotes are left to shlex.quote; other UTF-8 passes as is (measured on both).
_SAFE = frozenset(chr(c) for c in range(0x20, 0x7f)) - set("#%\\")


def task_env(settings, cron: dict) -> list:
    """(name, value) pairs a run of this cron needs, marker excluded, in line order."""
    pairs = [("ID", str(cron["id"])),
             ("QL_DATA_DIR", real_data_dir(settings)),
             ("QL_LOG_NAME", log_name(cron))]
    # A blank value means "none": it would only make task.sh cd into the data dir or eval
    # nothing.
    pairs += [(name, cron[field]) for name, field in HOOKS
              if cron.get(field) and cron[field].strip()]
    if cron.get("hosts_mode") == "one":  # task.sh claims the firing first (core/fleet.py)
        pairs.append(("QL_CLAIM", "1"))
    return pairs


def needs_escape(text: str) -> bool:
    """True when text cannot sit on a crontab line as it is."""
    return any(c not in _SAFE and c.isascii() for c in text)


def encode(text: str) -> str:
    """text in printf %b form: each byte outside the safe set as \\0ooo (task.sh decodes it)."""
    out = []
    for char in text:
        if char in _SAFE or not char.isascii():
            out.append(char)
        else:
            out.append(f"\\0{ord(char):03o}")
    return "".join(out)


def shell_word(text: str, escaped: bool) -> str:
    """text as one shell word, encoded when escaped (task.sh undoes it)."""
    return shlex.quote(encode(text) if escaped else text)


def _command_part(settings, cron: dict, scripts: str, active: bool) -> str:
    pairs = task_env(settings, cron)
    # One flag for every encodable value: if any needs escaping, all are written escaped,
    # so the same cron always gives the same line.
    escaped = needs_escape(cron["command"]) or any(
        needs_escape(value) for name, value in pairs if name in _ENCODED)
    env = [f"{k}={shell_word(v, escaped and k in _ENCODED)}" for k, v in pairs]
    if active:
        env.insert(1, MARKER)
    if escaped:
        env.append("QL_ESCAPED=1")
    task = os.path.join(scripts, "task.sh")
    if needs_escape(task) or any(c.isspace() for c in task):
        raise CrontabError(f"the path of task.sh ({task!r}) holds a character crontab lines "
                           "cannot carry (#, %, a backslash, a quote, a space or a control character)")
    return f"{' '.join(env)} {task} {shell_word(cron['command'], escaped)}"


def _active(settings, cron: dict) -> bool:
    from qlshadow.core.schedule import field_count
    extra = cron.get("extra_schedules")
    return (settings.scheduler == "system" and not cron.get("is_disabled")
            and field_count(cron["schedule"]) == 5 and extra in (None, "", "[]"))


def line(settings, cron: dict, scripts: str) -> str:
    """The crontab line of one cron: active (with the marker) or a `# ` comment."""
    from qlshadow.core.schedule import crontab_fields, field_count
    active = _active(settings, cron)
    command = _command_part(settings, cron, scripts, active)
    size = len(command.encode("utf-8"))
    if active and size > MAX_COMMAND_BYTES:
        raise CrontabError(f"cron {cron['id']}'s crontab line has a command part of {size} bytes; "
                           f"Debian's crontab refuses more than {MAX_COMMAND_BYTES}")
    schedule = cron["schedule"]
    if field_count(schedule) == 5:
        schedule = crontab_fields(schedule)
    text = f"{schedule} {command}"
    return text if active else "# " + text


def _biggest_field(cron: dict) -> str:
    fields = [("command", cron.get("command") or "")] + [
        (field, cron.get(field) or "") for _, field in HOOKS]
    return max(fields, key=lambda item: len(encode(item[1]).encode("utf-8")))[0]


def check_cron(settings, cron: dict) -> None:
    """Raise CronTooLong when the cron's crontab line could not be installed everywhere.

    Checked as if the cron were enabled, so that enabling it later cannot fail.
    """
    probe = dict(cron, id=cron.get("id") or 10**18, is_disabled=0, extra_schedules=None)
    probe.setdefault("name", "")
    try:
        command = _command_part(settings, probe, shell_dir(), True)
    except CrontabError:
        return  # a problem of the installation, not of this cron: sync reports it
    size = len(command.encode("utf-8"))
    if size > MAX_COMMAND_BYTES:
        field = _biggest_field(probe)
        raise CronTooLong(
            field, f"'{field}' makes the crontab line's command part {size} bytes (with "
            f"task_before, task_after and work_dir, after encoding '#', '%', backslashes and "
            f"control characters as 5 bytes each); cron daemons accept at most "
            f"{MAX_COMMAND_BYTES}, so shorten it by {size - MAX_COMMAND_BYTES} bytes.")


class CronTooLong(ValueError):
    """A cron whose crontab line no daemon would install; .field names the longest text."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def stored_crons() -> list:
    from qlshadow.storage.db import connected
    from qlshadow.storage.models import Cron
    with connected():
        return list(Cron.select().order_by(Cron.id).dicts())


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
    try:
        values = notify_sources(environ={}, config_file=conf).values
    except (OSError, ValueError):
        return True
    return any(value.strip() for key, value in values.items() if key not in _NOT_CHANNELS)


def notify_line(settings, fleet: bool = False) -> str:
    """The block's own line: shell/tick.sh every minute, which asks the running service to
    tick and starts `qlshadow notify` only when it does not answer (alerts.py, outage.py),
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
            and _in_a_fleet():
        tick = notify_line(settings, fleet=True)
        if not tick.startswith("#"):
            active = max(active, 1)
    if active + 1 > MAX_LINES_NON_ROOT and os.geteuid() != 0:
        raise CrontabError(f"{active} active crons and the notify line: BusyBox crond reads "
                           f"only the first {MAX_LINES_NON_ROOT} lines of a non-root user's "
                           "crontab")
    return "".join(f"{text}\n" for text in [header] + lines + [tick]), active


def _in_a_fleet() -> bool:
    """True when more than one host has recorded itself in the database (core/fleet.py);
    False with no database open (a block rendered from rows alone)."""
    from qlshadow.storage.db import connected
    from qlshadow.storage.models import Host, database
    if database.obj is None:
        return False
    with connected():
        return Host.select().limit(2).count() > 1


def render(settings) -> str:
    """Our block's content (header, one line per cron) for the crons in the database."""
    return render_rows(settings, stored_crons())[0]


def _write_if_changed(path: str, text: str) -> None:
    """Every cron change comes here: rewrite only on a difference (flash wears out)."""
    try:
        with open(path, encoding="utf-8") as fh:
            if fh.read() == text and os.stat(path).st_mode & 0o077 == 0:
                return
    except OSError:
        pass
    write_private(path, text)


def _one_line(key: str, value: str) -> str:
    if "\n" in value or "\r" in value:
        raise CrontabError(f"{key} holds a line break; task runs cannot be configured")
    return value


def protect_data_dir(settings) -> None:
    """Data dir 0700 and the SQLite files 0600: task logs and commands often hold secrets."""
    data = real_data_dir(settings)
    paths = [data]
    if settings.db_url.startswith("sqlite:///"):
        db_file = os.path.abspath(settings.db_url[len("sqlite:///"):].split("?", 1)[0])
        paths += [db_file, db_file + "-wal", db_file + "-shm", db_file + "-journal"]
    for path in paths:
        try:
            if os.stat(path).st_uid == os.geteuid():
                os.chmod(path, 0o700 if path == data else 0o600)
        except OSError:
            pass  # missing, or not ours to change


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
        ("QL_DATA_DIR", data), ("QL_DB_URL", _absolute_db_url(settings.db_url)),
        ("QL_DB_TIMEOUT", str(settings.db_timeout))))
    try:
        os.makedirs(data, mode=0o700, exist_ok=True)
        protect_data_dir(settings)
        for name, text in ((RUNNER_CONF, conf), (RUNNER_ENV, shell_env)):
            _write_if_changed(os.path.join(data, name), text)
        if not os.path.exists(os.path.join(data, NOTIFY_CONF)):
            write_notify_conf(settings)  # the server's start writes it again with its own
    except OSError as exc:
        raise CrontabError(f"cannot write the task files in {data}: {exc.strerror or exc}") from None
    from peewee import DatabaseError, InterfaceError

    from qlshadow.core.auth import runner_token
    from qlshadow.storage.db import connected, write_transaction
    from qlshadow.errors import QlError
    try:
        with connected(), write_transaction():
            runner_token(data)
    except QlError as exc:  # an app that took the runner's name, say
        raise CrontabError(f"cannot issue the runner token: {exc}") from None
    except (DatabaseError, InterfaceError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CrontabError(f"cannot issue the runner token: {first}") from None


def notify_conf_text(settings, environ=None) -> str:
    """The text of notify.conf: what `qlshadow notify` needs, as this process sees it.

    The channels' variables come from the conf file and the environment (notify.py's
    rule: the environment wins), so a channel set only in the service's environment
    reaches the tick that crond starts with almost no environment.
    """
    from qlshadow.config import NOTIFY_MULTILINE_KEYS, notify_settings
    pairs = [("QL_DATA_DIR", real_data_dir(settings)),
             ("QL_DB_URL", _absolute_db_url(settings.db_url)),
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
    _write_if_changed(path, notify_conf_text(settings, environ))


def _absolute_db_url(url: str) -> str:
    """A SQLite URL with an absolute path: crond runs tasks in another directory."""
    if not url.startswith("sqlite:///"):
        return url
    path, sep, query = url[len("sqlite:///"):].partition("?")
    return "sqlite:///" + os.path.abspath(path) + sep + query


def state_file(settings) -> str:
    """Where the reason of the last failed install is kept until an install succeeds."""
    return os.path.abspath(settings.crontab_file) + ".failed"


def installed_file(settings) -> str:
    """Where the last install's outcome is kept: the install command and the digest of the
    block file it installed, so that the block file is reported installed only when it was
    (a block file written by a command that installed nothing, or elsewhere, is not)."""
    return os.path.abspath(settings.crontab_file) + ".installed"


def _digest(text: str) -> str:
    import hashlib
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _note_installed(settings, content: str | None) -> None:
    """Record that content was installed with this settings' command (None: nothing was)."""
    path = installed_file(settings)
    try:
        if content is None:
            if os.path.exists(path):
                os.unlink(path)
        else:
            import json
            _write_if_changed(path, json.dumps({"install": settings.crontab_install,
                                                "sha256": _digest(content)}) + "\n")
    except OSError:
        pass  # install_state then says the block file is not known to be installed


def _installed_as_written(settings) -> bool:
    """True when the block file is what the last install installed, with this command."""
    import json
    try:
        with open(installed_file(settings), encoding="utf-8") as fh:
            noted = json.load(fh)
        with open(settings.crontab_file, encoding="utf-8", errors="surrogateescape") as fh:
            text = fh.read()
    except (OSError, ValueError):
        return False
    return (isinstance(noted, dict) and noted.get("install") == settings.crontab_install
            and noted.get("sha256") == _digest(text))


def install_state(settings) -> str:
    """The crontab's state for /health and `qlshadow crontab`: installed, or why not."""
    if settings.scheduler != "system":
        return "not used: node scheduler"
    try:
        with open(state_file(settings), encoding="utf-8") as fh:
            return "not installed: " + (fh.read().strip() or "unknown reason")
    except OSError:
        pass
    if not settings.crontab_install.strip():
        return "written, not installed: QL_CRONTAB_INSTALL is empty"
    if os.path.exists(settings.crontab_file):
        if _installed_as_written(settings):
            return "installed"
        return (f"not installed: {os.path.abspath(settings.crontab_file)} holds a block "
                f"that `{settings.crontab_install}` did not install; `qlshadow crontab` "
                "installs it")
    return "none yet"


def install_failed(state: str) -> bool:
    """True for an install_state that /health reports as not ok."""
    return state.startswith("not installed")


# --- the settings the server installs with ------------------------------------------------
# `qlshadow serve` records these in the data dir; a CLI command given the same data dir
# uses them for every key its own environment and config file leave unset, so that it
# installs exactly where the server does (never with the default into its user's crontab).
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
        _write_if_changed(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    except OSError as exc:
        raise CrontabError(f"cannot write {path}: {exc.strerror or exc}") from None


def recorded_settings(data_dir: str) -> dict | None:
    """What the server last recorded in data_dir, or None (no server started there yet)."""
    import json
    try:
        with open(os.path.join(os.path.abspath(data_dir), RECORD), encoding="utf-8") as fh:
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


def _speaks_for_server(settings) -> bool:
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


def note_state(settings, problem: str | None) -> None:
    if not _speaks_for_server(settings):
        return  # another install target's outcome is not the server's state
    path = state_file(settings)
    try:
        if problem is None:
            if os.path.exists(path):
                os.unlink(path)
        else:
            write_private(path, problem + "\n")
    except OSError:
        pass  # the failure is still raised to the caller and logged there


# --- our block inside the user's crontab --------------------------------------------------

def markers(settings) -> tuple:
    """The begin and end lines of our block; they name the data dir's real path, so two
    installations on one box keep their own blocks and two spellings of one dir share one."""
    data = encode(real_data_dir(settings))
    return f"# BEGIN qlshadow {data}", f"# END qlshadow {data}"


_MARK = re.compile(rb"# (BEGIN|END) qlshadow (/.*)")
_OCTAL = re.compile(rb"\\0([0-7]{3})")


def _our_marks(settings, lines: list) -> list:
    """(index, is begin) of the marker lines that name our data dir in any spelling: a block
    an earlier release marked with a symlink's name is ours as well."""
    mine = real_data_dir(settings)
    exact = encode(mine).encode()
    ours: dict = {}
    found = []
    for i, text in enumerate(lines):
        match = _MARK.fullmatch(text.rstrip())
        if not match:
            continue
        name = match.group(2)
        if name not in ours:
            path = os.fsdecode(_OCTAL.sub(lambda m: bytes([int(m.group(1), 8)]), name))
            ours[name] = name == exact or ("\0" not in path and os.path.realpath(path) == mine)
        if ours[name]:
            found.append((i, match.group(1) == b"BEGIN"))
    return found


def _old_whole_crontab_lines(settings, lines: list) -> set:
    """Indexes of the lines an earlier qlshadow wrote when it owned the whole crontab.

    It wrote HEADER_SYSTEM first and no markers; its lines name our data dir (as given or
    its real path). Only these are taken over, so that upgrading never installs every cron
    twice.
    """
    if not lines or lines[0].rstrip() != HEADER_SYSTEM.encode():
        return set()
    spellings = {os.path.abspath(settings.data_dir), real_data_dir(settings)}
    names = {f"QL_DATA_DIR={shell_word(data, escaped)} ".encode()
             for data in spellings for escaped in (False, True)}
    return {0} | {i for i, text in enumerate(lines)
                  if b" ID=" in text and any(name in text for name in names)}


def _dropped(lines: list, taken: set, drop: tuple) -> set:
    """Indexes of the lines to drop: (line number, text) pairs, each the line at its number
    when it still has that text (line ends aside), else the first such line outside taken."""
    gone: set = set()
    for number, wanted in drop:
        order = [number - 1] + list(range(len(lines)))
        gone.update(next(([i] for i in order if 0 <= i < len(lines) and i not in taken | gone
                          and lines[i].rstrip(b"\r\n") == wanted), []))
    return gone


def compose(settings, current: bytes, content: str | None, drop: tuple = ()) -> bytes:
    """current with our block replaced by content (None: removed); all else byte for byte,
    but for the user's lines in drop, (line number, text) pairs (`qlshadow adopt`).

    Our block is found by markers naming our data dir in any spelling. A new block goes at
    the end; several blocks that each pair up (one per spelling, or a doubled crontab)
    become one, where the first stood. Markers that do not pair up (one missing, out of
    order) are refused: only the user can tell which lines are ours then.
    """
    begin, end = markers(settings)
    lines = current.splitlines(keepends=True)
    marks = _our_marks(settings, lines)
    kinds = [is_begin for _, is_begin in marks]
    if not marks:
        old = _old_whole_crontab_lines(settings, lines)
        old |= _dropped(lines, old, drop)
        before = b"".join(text for i, text in enumerate(lines) if i not in old)
        after = b""
    elif len(kinds) % 2 == 0 and kinds == [True, False] * (len(kinds) // 2):
        inside = set()
        for (first, _), (last, _) in zip(marks[0::2], marks[1::2], strict=True):
            inside.update(range(first, last + 1))
        start = marks[0][0]
        inside |= _dropped(lines, inside, drop)
        before = b"".join(text for i, text in enumerate(lines[:start]) if i not in inside)
        after = b"".join(text for i, text in enumerate(lines) if i > start and i not in inside)
    else:
        raise CrontabError(f"the crontab holds the line {begin!r} {kinds.count(True)} and "
                           f"{end!r} {kinds.count(False)} times (counting other spellings of "
                           "the data dir), not in pairs in that order; fix it with crontab -e, "
                           "nothing was installed")
    if content is None:
        return before + after
    if before and not before.endswith(b"\n"):
        before += b"\n"
    return before + f"{begin}\n{content}{end}\n".encode() + after


def _run(template: str, path: str | None, key: str) -> subprocess.CompletedProcess:
    """Run a command template without a shell ({file} → path), its output captured."""
    try:
        argv = shlex.split(template)
    except ValueError as exc:
        raise CrontabError(f"{key}={template!r} cannot be split into words ({exc})") from None
    if path is not None:
        argv = [word.replace("{file}", path) for word in argv]
    what = "reading" if key == "QL_CRONTAB_LIST" else "installing"
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=INSTALL_TIMEOUT)
    except FileNotFoundError:
        raise CrontabError(f"{what} the crontab failed: {argv[0]} not found ({key})") from None
    except subprocess.TimeoutExpired:
        raise CrontabError(f"{what} the crontab failed: {argv[0]} ran longer than "
                           f"{INSTALL_TIMEOUT} s ({key})") from None
    except OSError as exc:
        raise CrontabError(f"{what} the crontab failed: {argv[0]}: {exc.strerror or exc} "
                           f"({key})") from None


def _first_line(result: subprocess.CompletedProcess) -> str:
    said = (result.stderr or result.stdout).decode("utf-8", "replace").strip().splitlines()
    return f": {said[0]}" if said else ""


# "No crontab yet" as Debian's and cronie's crontab say it, and as BusyBox's does (it opens
# the user's file in the spool directory and reports the missing file).
_NO_CRONTAB = (re.compile(rb"no crontab for "),
               re.compile(rb"can't open '[^'/]+': No such file or directory"))


def read_crontab(settings) -> bytes:
    """The crontab QL_CRONTAB_LIST prints (empty: none yet, or no list command)."""
    if not settings.crontab_list.strip():
        return b""
    result = _run(settings.crontab_list, None, "QL_CRONTAB_LIST")
    if result.returncode == 0:
        return result.stdout
    if not result.stdout and any(p.search(result.stderr) for p in _NO_CRONTAB):
        return b""
    command = shlex.join(shlex.split(settings.crontab_list))
    raise CrontabError(f"reading the crontab failed: {command} exited {result.returncode}"
                       f"{_first_line(result)}; nothing was installed")


# Debian's crontab(1) copies its file argument into a 100-byte buffer: a longer name is cut
# and the install fails with "No such file or directory" on a name that does not exist.
DEBIAN_NAME_MAX = 99


def install_bytes(settings, text: bytes) -> None:
    """Install text with QL_CRONTAB_INSTALL from a private temp file beside the block file."""
    import tempfile
    directory = os.path.dirname(os.path.abspath(settings.crontab_file))
    try:
        fd, path = tempfile.mkstemp(dir=directory, prefix=".crontab-install.")  # 0600
        with os.fdopen(fd, "wb") as fh:
            fh.write(text)
    except OSError as exc:
        raise CrontabError(f"cannot write the crontab to install in {directory}: "
                           f"{exc.strerror or exc}") from None
    try:
        result = _run(settings.crontab_install, path, "QL_CRONTAB_INSTALL")
        if result.returncode != 0:
            argv = [word.replace("{file}", path) for word in shlex.split(settings.crontab_install)]
            hint = ""
            if len(os.fsencode(path)) > DEBIAN_NAME_MAX:
                hint = (f" (Debian's crontab reads at most {DEBIAN_NAME_MAX} bytes of a file name and this "
                        "one is longer: install through stdin, QL_CRONTAB_INSTALL=\"sh -c 'crontab - < "
                        "\\\"$0\\\"' {file}\" with QL_CRONTAB_LIST=\"crontab -l\", "
                        "or use a shorter data dir)")
            raise CrontabError(f"installing the crontab failed: {shlex.join(argv)} exited "
                               f"{result.returncode}{_first_line(result)}{hint}")
    finally:
        os.unlink(path)


# Another program's crontab run at the same moment as ours can undo our install or double
# the crontab: BusyBox's crontab writes through one fixed temp name, `<user>.new`, opened
# with O_TRUNC|O_APPEND and then renamed, so two runs that overlap can both append to one
# file, and the later rename fails with "can't move 'root.new' to 'root'". So every install
# is read back (QL_CRONTAB_LIST): when our block is not as composed, the text read is
# composed again and installed again, at most INSTALL_ATTEMPTS times. A doubled crontab
# (our text and the other program's, one after the other) gets our block in the other
# program's text.
INSTALL_ATTEMPTS = 5


def _other_text(settings, seen: bytes, wanted: bytes, before: bytes) -> bytes:
    """The other program's text when seen is wanted and that text one after the other,
    else seen. The other text is a whole crontab when it holds our block too or begins
    with the crontab we read before installing; lines merely added after ours are not."""
    if seen != wanted and wanted:
        for other in (seen[len(wanted):] if seen.startswith(wanted) else b"",
                      seen[:-len(wanted)] if seen.endswith(wanted) else b""):
            if other and ((before and other.startswith(before))
                          or _our_marks(settings, other.splitlines(True))):
                return other
    return seen


def _install(settings, content: str | None, drop: tuple = ()) -> bool:
    """Put our block with this content (None: no block) into the crontab; True when the
    crontab had to be installed. Read back after each install (see INSTALL_ATTEMPTS)."""
    actual = base = read_crontab(settings)
    verify = bool(settings.crontab_list.strip())
    for attempt in range(INSTALL_ATTEMPTS):
        wanted = compose(settings, base, content, drop)
        if wanted == actual:
            return attempt > 0
        try:
            install_bytes(settings, wanted)
        except CrontabError as exc:
            failure: CrontabError | None = exc
        else:
            failure = None
        if not verify:
            if failure is not None:
                raise failure
            return True
        try:
            seen = read_crontab(settings)
        except CrontabError:
            if failure is not None:
                raise failure from None
            return True  # installed, not verifiable now: the next change reads it again
        if failure is not None and seen == actual:
            raise failure  # the crontab is as it was: our install failed by itself
        if seen == wanted:
            drop = ()  # taken out: the same text once more would be another line
        base = _other_text(settings, seen, wanted, actual)
        actual = seen
    raise CrontabError(f"another program changed the crontab during each of {INSTALL_ATTEMPTS} "
                       "installs; try again")


def write(settings, text: str) -> str:
    """Replace the block file (QL_CRONTAB_FILE) atomically, 0600: its lines carry the
    user's commands, which often hold secrets."""
    path = os.path.abspath(settings.crontab_file)
    try:
        write_private(path, text)
    except OSError as exc:
        raise CrontabError(f"cannot write the crontab {path}: {exc.strerror or exc}") from None
    return path


def put(settings, content: str, active: int, drop: tuple = ()) -> str:
    """Install our block (none when no line is active), then write the block file.

    The file is written only after the install succeeded, so that it always holds what
    is installed. Returns one line saying what was done where.
    """
    path = os.path.abspath(settings.crontab_file)
    if settings.scheduler != "system":
        _note_installed(settings, None)
        write(settings, content)
        return f"node scheduler: wrote {path}, installed nothing"
    if not settings.crontab_install.strip():
        _note_installed(settings, None)
        write(settings, content)
        return f"wrote {path}; installed nothing (QL_CRONTAB_INSTALL is empty)"
    installed = _install(settings, content if active else None, drop)
    write(settings, content)
    _note_installed(settings, content)
    if active:  # on OpenWrt crond may not run at all (app/host/crond.py)
        from qlshadow.host.crond import ensure_running
        ensure_running()
    lines = f"{active} active line{'' if active == 1 else 's'}"
    where = f"with `{settings.crontab_install}` (block file {path})"
    if not installed:
        return f"crontab already up to date ({lines}) {where}"
    if active:
        return f"installed qlshadow's block ({lines}) {where}"
    return f"removed qlshadow's block (no active line) {where}"


# The directory of the crontab locks: one every user and data dir on the box sees, in RAM
# on OpenWrt (/var/lock is /tmp/lock) and on Debian (/run/lock, which systemd's PrivateTmp
# leaves shared); /tmp on a box without it.
LOCK_DIRS = ("/var/lock", "/tmp")


def crontab_key(settings) -> str:
    """Which crontab the settings install into, alike for every data dir on the box: the
    uid and the words of QL_CRONTAB_LIST (else QL_CRONTAB_INSTALL), with the crontab
    program's path, and a `busybox` before it, reduced to `crontab`."""
    template = settings.crontab_list.strip() or settings.crontab_install.strip()
    try:
        words = shlex.split(template)
    except ValueError:
        words = [template]
    key: list = []
    for word in words:
        if os.path.basename(word) == "crontab":
            if key and os.path.basename(key[-1]) == "busybox":
                key.pop()
            word = "crontab"
        key.append(word)
    return f"{os.geteuid()} {shlex.join(key)}"


def lock_path(settings) -> str:
    """The file whose flock serialises every install into this settings' crontab."""
    import hashlib
    directory = next((d for d in LOCK_DIRS if os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK)),
                     LOCK_DIRS[-1])
    digest = hashlib.sha256(crontab_key(settings).encode()).hexdigest()[:16]
    return os.path.join(directory, f"qlshadow-crontab-{digest}.lock")


class Lock:
    """Serialises crontab work across threads, processes and data dirs: first the data
    dir's (flock on the block file's directory, which holds its files), then, when
    something is installed, the crontab's (flock on lock_path, shared by every data dir
    that installs into it). So the crontab installed last was composed from the one
    installed before it, whichever data dir installed that."""

    def __init__(self, settings):
        self.directory = os.path.dirname(os.path.abspath(settings.crontab_file))
        self.crontab = lock_path(settings) if settings.crontab_install.strip() else None
        self.fds: list = []

    def _take(self, path: str, flags: int) -> None:
        import fcntl
        fd = os.open(path, flags | os.O_CLOEXEC, 0o600)
        self.fds.append(fd)
        if not flags & os.O_DIRECTORY and os.fstat(fd).st_uid != os.geteuid():
            # Another user's file would let that user hold our installs up at will.
            raise CrontabError(f"the crontab lock {path} belongs to another user; remove it")
        fcntl.flock(fd, fcntl.LOCK_EX)

    def __enter__(self):
        what = self.directory
        try:
            os.makedirs(self.directory, exist_ok=True)
            self._take(self.directory, os.O_RDONLY | os.O_DIRECTORY)
            if self.crontab:
                what = self.crontab
                self._take(self.crontab, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW)
        except OSError as exc:
            self.__exit__()
            raise CrontabError(f"cannot lock {what}: {exc.strerror or exc}") from None
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info):
        while self.fds:
            os.close(self.fds.pop())  # closing releases the lock
        return False


def sync_locked(settings) -> str:
    check_installer(settings)  # this command's problem, not the server's state
    try:
        prepare_runner(settings)
        outcome = put(settings, *render_rows(settings, stored_crons()))
    except CrontabError as exc:
        note_state(settings, str(exc))
        raise
    note_state(settings, None)
    return outcome


def sync(settings) -> str:
    """Render our block from the database and (system mode) install it in the crontab.

    Returns one line saying what was done where; a failure raises CrontabError and is
    kept for install_state until a later sync succeeds.
    """
    with Lock(settings):
        return sync_locked(settings)


def remove(settings) -> str:
    """Take our block out of the crontab and forget the block file; one line says what."""
    with Lock(settings):
        check_installer(settings)
        if not settings.crontab_install.strip():
            return "QL_CRONTAB_INSTALL is empty: qlshadow installed nothing to remove"
        installed = _install(settings, None)
        where = f"with `{settings.crontab_install}`"
        for path in (os.path.abspath(settings.crontab_file), state_file(settings),
                     installed_file(settings)):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise CrontabError(f"cannot remove {path}: {exc.strerror or exc}") from None
        if not installed:
            return f"no qlshadow block in the crontab read {where.replace('with', 'for')}"
        return f"removed qlshadow's block {where}"
