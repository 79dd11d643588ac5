"""Crontab rendering and installation (SPEC §5), and the environment of a task run.

One line per cron, ordered by id. In system mode an enabled cron with a 5-field schedule
is an active line whose command carries the origin marker; everything else (disabled,
6-field, extra schedules, @once/@boot, and every line in node mode) is a `# ` comment
without it. The marker is written here and nowhere else.

A line must work under crond's bare environment, so it names everything task.sh needs
with absolute paths: the data dir (token, logs), the service URL, the qlshadow command
for token refresh, and the database when the command could not find it by itself; then
the cron's work_dir, task_before and task_after, when set.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile

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


def cli_command() -> str:
    """A shell command line that runs this installation's `qlshadow`, by absolute path."""
    script = os.path.join(os.path.dirname(sys.executable), "qlshadow")
    if os.path.isfile(script) and os.access(script, os.X_OK):
        return shlex.quote(script)
    # No console script next to the interpreter: run the installed package as a module.
    return f"{shlex.quote(sys.executable)} -m qlshadow.cli"


def _cli_config(settings) -> list:
    """QL_CONFIG / QL_DB_URL the qlshadow command needs to reach the same database."""
    pairs = []
    if settings.config_file:
        pairs.append(("QL_CONFIG", os.path.abspath(settings.config_file)))
    url = settings.db_url
    if url.startswith("sqlite:///"):
        path = os.path.abspath(url[len("sqlite:///"):].split("?", 1)[0])
        # A relative SQLite path means something else in crond's working directory.
        if path == os.path.join(os.path.abspath(settings.data_dir), "qlshadow.db"):
            return pairs
        query = url.partition("?")[2]
        url = "sqlite:///" + path + (f"?{query}" if query else "")
    elif "QL_DB_URL" in settings.file_keys:
        return pairs  # the config file names it; keep its password off the line
    pairs.append(("QL_DB_URL", url))
    return pairs


def log_name(cron: dict) -> str:
    """The log folder of a cron: its log_name or name reduced to safe characters."""
    raw = cron.get("log_name") or cron.get("name") or ""
    name = "".join(c if c in _LOG_NAME_CHARS else "_" for c in raw).lstrip(".")[:64]
    return name if any(c.isalnum() for c in name) else f"cron_{cron['id']}"


# The cron's hooks, passed only when set. task.sh decodes these and the command together
# when QL_ESCAPED=1, so one flag covers every text a crontab line carries for the cron.
HOOKS = (("QL_WORK_DIR", "work_dir"), ("QL_TASK_BEFORE", "task_before"),
         ("QL_TASK_AFTER", "task_after"))
_HOOK_NAMES = frozenset(name for name, _ in HOOKS)


def task_env(settings, cron: dict) -> list:
    """(name, value) pairs a run of this cron needs, marker excluded, in line order."""
    pairs = [("ID", str(cron["id"])),
             ("QL_DATA_DIR", os.path.abspath(settings.data_dir)),
             ("QL_BASE_URL", settings.base_url),
             ("QL_CLI", cli_command()),
             *_cli_config(settings),
             ("QL_LOG_NAME", log_name(cron))]
    # A blank value means "none": it would only make task.sh cd into the data dir or eval
    # nothing.
    pairs += [(name, cron[field]) for name, field in HOOKS
              if cron.get(field) and cron[field].strip()]
    return pairs


def needs_escape(text: str) -> bool:
    """True when text cannot sit on a crontab line as it is (a % or a line break)."""
    return any(c in text for c in "%\n\r")


def shell_word(text: str, escaped: bool) -> str:
    """text as one shell word, in printf %b form when escaped (task.sh undoes it).

    A crontab line cannot hold a newline, and Vixie-style crons turn % into one; the
    escaped form has neither.
    """
    if escaped:
        text = (text.replace("\\", "\\\\").replace("%", "\\0045")
                .replace("\n", "\\n").replace("\r", "\\r"))
    return shlex.quote(text)


def line(settings, cron: dict, scripts: str) -> str:
    """The crontab line of one cron: active (with the marker) or a `# ` comment."""
    from .schedule import field_count
    extra = cron.get("extra_schedules")
    active = (settings.scheduler == "system" and not cron.get("is_disabled")
              and field_count(cron["schedule"]) == 5 and extra in (None, "", "[]"))
    pairs = task_env(settings, cron)
    # One flag for the command and the hooks: if any of them needs escaping, all are
    # written escaped, so the same cron always gives the same line.
    escaped = needs_escape(cron["command"]) or any(
        needs_escape(value) for name, value in pairs if name in _HOOK_NAMES)
    env = [f"{k}={shell_word(v, escaped and k in _HOOK_NAMES)}" for k, v in pairs]
    if active:
        env.insert(1, MARKER)
    if escaped:
        env.append("QL_ESCAPED=1")
    word = shell_word(cron["command"], escaped)
    text = f"{cron['schedule']} {' '.join(env)} {shlex.quote(os.path.join(scripts, 'task.sh'))} {word}"
    if "\n" in text or "\r" in text:
        raise CrontabError(f"cron {cron['id']} would need a line break in its crontab line")
    return text if active else "# " + text


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
    return "".join(f"{text}\n" for text in
                   [header] + [line(settings, cron, scripts) for cron in _crons()])


def write(settings, text: str) -> str:
    """Replace the crontab file atomically (temp file + rename in its directory)."""
    path = os.path.abspath(settings.crontab_file)
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".crontab.")
        try:
            # 0600: a line may carry the database URL.
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
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
    was rendered last and holds every committed change. A failure raises CrontabError;
    the committed change stays (see app/views/crons.py).
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
        path = write(settings, render(settings))
        if settings.scheduler == "system":
            install(settings, path)
        return path
    finally:
        os.close(lock)
