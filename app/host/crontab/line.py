"""One cron's crontab line: its environment, the escaping of every text it carries, and the
check that refuses a cron whose line no daemon would install.

In system mode an enabled cron with a 5-field schedule is an active line whose command
carries the origin marker; everything else (disabled, 6-field, extra schedules, @once/@boot,
and every line in node mode) is a `# ` comment without it. The marker is written here and
nowhere else.

A line must mean the same to BusyBox crond, Debian's Vixie cron and cronie (measured; see
docs/INSTALL.md): BusyBox ends a line at '#' and joins a line ending in a backslash to the
next; Vixie cron turns '%' into a line break and eats backslashes; Debian's crontab refuses
a command part of 999 bytes or more and then installs nothing at all. So the schedule is
written in the form all of them read alike (schedule.crontab_fields), and every text the
user gave (command, hooks, work dir) and the data dir are written with printf %b octal
escapes for every byte outside a safe set, which task.sh decodes. A cron whose line would
still be too long is refused when it is created or changed (check_cron).
"""
from __future__ import annotations

import os
import shlex
import sys

from qlshadow.host.crontab.data_dir import real_data_dir
from qlshadow.host.crontab.errors import CronTooLong, CrontabError

MARKER = "QL_EXECUTION_ORIGIN=scheduled_system"
_LOG_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
# The cron's hooks, passed only when set. task.sh decodes these, the data dir and the
# command together when QL_ESCAPED=1, so one flag covers every text a line carries.
HOOKS = (("QL_WORK_DIR", "work_dir"), ("QL_TASK_BEFORE", "task_before"),
         ("QL_TASK_AFTER", "task_after"))
_ENCODED = frozenset(name for name, _ in HOOKS) | {"QL_DATA_DIR"}
# Debian's crontab refuses a command part (all after the five schedule fields) of 999
# bytes or more; BusyBox crond and cronie take longer ones.
MAX_COMMAND_BYTES = 998
# Bytes a crontab line carries as they are: printable ASCII except '#' (BusyBox: comment),
# '%' (Vixie: line break) and '\\' (Vixie eats it; BusyBox joins a line ending in one to the
# next). Quotes are left to shlex.quote; other UTF-8 passes as is (measured on both).
_SAFE = frozenset(chr(c) for c in range(0x20, 0x7f)) - set("#%\\")


def shell_dir() -> str:
    """The directory holding task.sh: the source tree's shell/, else the installed copy."""
    # app/host/crontab/line.py: the source tree's root is four levels up.
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    candidates = (os.path.join(os.path.dirname(package), "shell"),
                  os.path.join(sys.prefix, "share", "qlshadow", "shell"))
    for candidate in candidates:
        if os.path.isfile(os.path.join(candidate, "task.sh")):
            return candidate
    raise CrontabError("task.sh not found in " + " or ".join(candidates))


def log_name(cron: dict) -> str:
    """The log folder of a cron: its log_name or name reduced to safe characters."""
    raw = cron.get("log_name") or cron.get("name") or ""
    name = "".join(c if c in _LOG_NAME_CHARS else "_" for c in raw).lstrip(".")[:64]
    return name if any(c.isalnum() for c in name) else f"cron_{cron['id']}"


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
