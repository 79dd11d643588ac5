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

Secrets stay off the line: what task.sh needs besides the cron's own fields (service URL,
the qlshadow command, the timeout) is in $QL_DATA_DIR/runner.env, and what the qlshadow
command needs to reach the database is in runner.conf, both readable by the service's
user only.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys

from .files import write_private

MARKER = "QL_EXECUTION_ORIGIN=scheduled_system"
INSTALL_TIMEOUT = 30
_LOG_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


class CrontabError(Exception):
    """The crontab could not be written or installed; the message is one sentence."""


def shell_dir() -> str:
    """The directory holding task.sh: the source tree's shell/, else the installed copy."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = (os.path.join(os.path.dirname(here), "shell"),
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
# Bytes a crontab line carries as they are: printable ASCII except '#' (BusyBox: comment),
# '%' (Vixie: line break) and '\\' (Vixie eats it; BusyBox joins a line ending in one to the
# next). Quotes are left to shlex.quote; other UTF-8 passes as is (measured on both).
_SAFE = frozenset(chr(c) for c in range(0x20, 0x7f)) - set("#%\\")


def task_env(settings, cron: dict) -> list:
    """(name, value) pairs a run of this cron needs, marker excluded, in line order."""
    pairs = [("ID", str(cron["id"])),
             ("QL_DATA_DIR", os.path.abspath(settings.data_dir)),
             ("QL_LOG_NAME", log_name(cron))]
    # A blank value means "none": it would only make task.sh cd into the data dir or eval
    # nothing.
    pairs += [(name, cron[field]) for name, field in HOOKS
              if cron.get(field) and cron[field].strip()]
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
            out.append("\\0%03o" % ord(char))
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
    from .schedule import field_count
    extra = cron.get("extra_schedules")
    return (settings.scheduler == "system" and not cron.get("is_disabled")
            and field_count(cron["schedule"]) == 5 and extra in (None, "", "[]"))


def line(settings, cron: dict, scripts: str) -> str:
    """The crontab line of one cron: active (with the marker) or a `# ` comment."""
    from .schedule import crontab_fields, field_count
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


def _crons() -> list:
    from .db import connected
    from .models import Cron
    with connected():
        return list(Cron.select().order_by(Cron.id).dicts())


def render(settings) -> str:
    """The whole crontab text for the crons in the database; same data, same bytes."""
    scripts = shell_dir()
    header = "# qlshadow crontab (system mode): generated from the database; edits are overwritten"
    if settings.scheduler != "system":
        header = "# qlshadow crontab (node mode): every line is a comment, nothing is installed"
    lines = [line(settings, cron, scripts) for cron in _crons()]
    active = sum(1 for text in lines if not text.startswith("#"))
    if active > MAX_LINES_NON_ROOT and os.geteuid() != 0:
        raise CrontabError(f"{active} active crons: BusyBox crond reads only the first "
                           f"{MAX_LINES_NON_ROOT} lines of a non-root user's crontab")
    return "".join(f"{text}\n" for text in [header] + lines)


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
    data = os.path.abspath(settings.data_dir)
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
    timeout); runner.conf is a config file for `qlshadow token runner`, so the database
    URL reaches that command without being on a crontab line or in a task's environment.
    """
    data = os.path.abspath(settings.data_dir)
    timeout = getattr(settings, "callback_timeout", None) or 5
    shell_env = (f"ql_base_url={_one_line('QL_BASE_URL', base_url(settings))}\n"
                 f"ql_cli={_one_line('the qlshadow command', cli_command())}\n"
                 f"ql_timeout={int(timeout) if float(timeout) >= 1 else 1}\n")
    conf = "".join(f'{key}="{_one_line(key, value)}"\n' for key, value in (
        ("QL_DATA_DIR", data), ("QL_DB_URL", _absolute_db_url(settings.db_url)),
        ("QL_DB_TIMEOUT", str(settings.db_timeout))))
    try:
        os.makedirs(data, mode=0o700, exist_ok=True)
        protect_data_dir(settings)
        for name, text in ((RUNNER_CONF, conf), (RUNNER_ENV, shell_env)):
            _write_if_changed(os.path.join(data, name), text)
    except OSError as exc:
        raise CrontabError(f"cannot write the task files in {data}: {exc.strerror or exc}") from None
    from peewee import DatabaseError, InterfaceError

    from .auth import runner_token
    from .db import connected, write_transaction
    try:
        with connected(), write_transaction():
            runner_token(data)
    except (DatabaseError, InterfaceError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CrontabError(f"cannot issue the runner token: {first}") from None


def _absolute_db_url(url: str) -> str:
    """A SQLite URL with an absolute path: crond runs tasks in another directory."""
    if not url.startswith("sqlite:///"):
        return url
    path, sep, query = url[len("sqlite:///"):].partition("?")
    return "sqlite:///" + os.path.abspath(path) + sep + query


def state_file(settings) -> str:
    """Where the reason of the last failed install is kept until an install succeeds."""
    return os.path.abspath(settings.crontab_file) + ".failed"


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
        return "installed"
    return "none yet"


def _note_state(settings, problem: str | None) -> None:
    path = state_file(settings)
    try:
        if problem is None:
            if os.path.exists(path):
                os.unlink(path)
        else:
            write_private(path, problem + "\n")
    except OSError:
        pass  # the failure is still raised to the caller and logged there


def write(settings, text: str) -> str:
    """Replace the crontab file atomically (temp file + rename), 0600: its lines carry the
    user's commands, which often hold secrets."""
    path = os.path.abspath(settings.crontab_file)
    try:
        write_private(path, text)
    except OSError as exc:
        raise CrontabError(f"cannot write the crontab {path}: {exc.strerror or exc}") from None
    return path


def install(settings, path: str) -> bool:
    """Run QL_CRONTAB_INSTALL with {file} → path; False when it is empty.

    It runs without a shell: the template is split into words first, so the path stays
    one argument whatever it contains. A template that needs a shell can pass the path as
    a positional parameter: sh -c 'crontab "$1" && ...' sh {file}
    """
    template = settings.crontab_install
    if not template.strip():
        return False
    try:
        argv = [word.replace("{file}", path) for word in shlex.split(template)]
    except ValueError as exc:
        raise CrontabError(f"QL_CRONTAB_INSTALL={template!r} cannot be split into words ({exc})") from None
    try:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                timeout=INSTALL_TIMEOUT)
    except FileNotFoundError:
        raise CrontabError(f"installing the crontab failed: {argv[0]} not found (QL_CRONTAB_INSTALL)") from None
    except subprocess.TimeoutExpired:
        raise CrontabError(f"installing the crontab failed: {argv[0]} ran longer than {INSTALL_TIMEOUT} s") from None
    except OSError as exc:
        raise CrontabError(f"installing the crontab failed: {argv[0]}: {exc.strerror or exc}") from None
    if result.returncode != 0:
        said = (result.stderr or result.stdout).decode("utf-8", "replace").strip().splitlines()
        raise CrontabError(f"installing the crontab failed: {shlex.join(argv)} exited "
                           f"{result.returncode}" + (f": {said[0]}" if said else ""))
    return True


def sync(settings) -> str:
    """Render, write and (system mode) install the crontab; returns the file's path.

    Callers run this after the cron change has committed. Renders are serialised with a
    lock on the file's directory (across threads and processes), so the file written last
    was rendered last and holds every committed change. A failure raises CrontabError and
    is kept for install_state until a later sync succeeds; the committed change stays
    (see app/views/crons.py).
    """
    import fcntl
    directory = os.path.dirname(os.path.abspath(settings.crontab_file))
    try:
        os.makedirs(directory, exist_ok=True)
        lock = os.open(directory, os.O_RDONLY)
    except OSError as exc:
        raise CrontabError(f"cannot open the crontab directory {directory}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            prepare_runner(settings)
            path = write(settings, render(settings))
            if settings.scheduler == "system":
                install(settings, path)
        except CrontabError as exc:
            _note_state(settings, str(exc))
            raise
        _note_state(settings, None)
        return path
    finally:
        os.close(lock)
