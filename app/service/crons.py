"""Cron definitions: validation, create/update/delete/enable/disable, 2.x JSON (no Flask).

Shared by the HTTP API and the command line so both apply the same rules.
"""
from __future__ import annotations

import json
import time

from qlshadow.errors import InvalidInput, NotFound
from qlshadow.storage.models import (DEFINITION_FIELDS, REQUIRED_FIELDS, Cron, RunningInstance,
                                     storable)
from qlshadow.parse import INT64_MAX, TIME_MAX, parse_ids, to_int
from qlshadow.core import fleet
from qlshadow.core.schedule import check_schedule, quiet_minutes

MAX_TEXT = 4096


def _text(value, key: str, required: bool):
    if value is None and not required:
        return None
    if (not isinstance(value, str) or (required and not value.strip()) or len(value) > MAX_TEXT
            or not storable(value)):
        what = "a non-empty string" if required else "a string or null"
        raise InvalidInput(f"'{key}' must be {what} of at most {MAX_TEXT} characters "
                           "(no NUL, valid Unicode).")
    return value


def _required_text(value, key: str) -> str:
    return _text(value, key, required=True)


def _optional_text(value, key: str):
    return _text(value, key, required=False)


TASK_FORMS = "task FILE [now] [ARGS...]"


def task_problem(command: str) -> str | None:
    """Why a command whose first word is QingLong's `task` cannot run here (shell/ql-task.sh), or None."""
    import shlex
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = []
    try:
        for word in lexer:
            if word and all(c in lexer.punctuation_chars for c in word):
                break  # the first simple command ends at ; & | ( ) < >
            words.append(word)
    except ValueError:
        return None  # unbalanced quotes: the shell reports that, not QingLong's task
    if not words or words[0] != "task":
        return None
    args = words[1:]
    if not args:
        return f"'command': `task` needs a script file ({TASK_FORMS})."
    if args[0].startswith("-"):
        return (f"'command': QingLong's `task {args[0]}` option is not supported here; "
                f"use {TASK_FORMS}.")
    if len(args) > 1 and args[1] in ("conc", "desi"):
        return (f"'command': QingLong's `task FILE {args[1]}` (a run per account) is not "
                f"supported here; use {TASK_FORMS}.")
    return None


def _command(value, key: str) -> str:
    value = _required_text(value, key)
    if value.lstrip().startswith("task"):  # QingLong's runner: refuse the forms we lack
        problem = task_problem(value)
        if problem:
            raise InvalidInput(problem)
    return value


def _schedule(value, key: str = "schedule") -> str:
    try:
        return check_schedule(value)
    except ValueError as exc:
        raise InvalidInput(f"'{key}': {exc}.") from None


def _extra_schedules(value, key: str):
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidInput("'extra_schedules' must be a list of {\"schedule\": \"...\"} or null.")
    out = []
    for item in value:
        if not isinstance(item, dict) or "schedule" not in item:
            raise InvalidInput("'extra_schedules' must be a list of {\"schedule\": \"...\"} or null.")
        out.append({"schedule": _schedule(item["schedule"], "extra_schedules")})
    return json.dumps(out, separators=(",", ":"))


def _flag(value, key: str) -> int:
    if value in (0, 1) and type(value) in (int, bool):
        return int(value)
    raise InvalidInput(f"'{key}' must be 0 or 1.")


# The check that turns a request value of each definition field (models.DEFINITION_FIELDS)
# into the stored one.
_CHECKS = dict(zip(DEFINITION_FIELDS, (
    _required_text, _command, _schedule, _extra_schedules, _optional_text,
    _optional_text, _optional_text, _optional_text, _flag), strict=True))
GRACE_MAX = 7 * 86400  # a weekly job may be allowed a day late; more is never a grace


def _grace(value, key: str):
    if value is None or (type(value) is int and 0 <= value <= GRACE_MAX):
        return value
    raise InvalidInput(f"'{key}' must be whole seconds from 0 to {GRACE_MAX}, or null for "
                       "the default from the schedule.")


ALERT_AFTER_MAX = 1000  # the per-cron rows retention keeps by default: all can be counted
MAX_RUNTIME_MAX = 31 * 86400


def _alert_after(value, key: str):
    if value is None or (type(value) is int and 1 <= value <= ALERT_AFTER_MAX):
        return value
    raise InvalidInput(f"'{key}' must be a whole number of failures in a row from 1 to "
                       f"{ALERT_AFTER_MAX}, or null for 1.")


def _max_runtime(value, key: str):
    if value is None or (type(value) is int and 1 <= value <= MAX_RUNTIME_MAX):
        return value
    raise InvalidInput(f"'{key}' must be whole seconds from 1 to {MAX_RUNTIME_MAX}, or null "
                       "for the usual stuck rule.")


def _quiet(value, key: str):
    if value is None or quiet_minutes(value) is not None:
        return value
    raise InvalidInput(f"'{key}' must be quiet hours as \"HH:MM-HH:MM\" in local time (it may "
                       "wrap midnight, start and end differ), or null for none.")


# How the cron is watched, not what it runs: kept out of DEFINITION_FIELDS, so changing it
# leaves the task revision (and every Run's replay check) as it was; the grace is out of
# the 2.x cron document, which GET /open/crons/health completes with the grace in effect;
# the alert tuning is in it (to_json), as keys 2.x clients do not read.
_MONITOR_CHECKS = {"grace": _grace, "alert_after": _alert_after, "max_runtime": _max_runtime,
                   "quiet": _quiet}
TUNING_FIELDS = ("alert_after", "max_runtime", "quiet", "snooze_until")
# Where the cron runs (core/fleet.py): also outside the task revision; a change of them
# changes crontab blocks, so each host named before or after installs its own again.
_FLEET_CHECKS = {"hosts": fleet.check_hosts, "hosts_mode": fleet.check_mode}


def validate(data, partial: bool) -> dict:
    """Validated column values from a request body; partial=True for updates."""
    if not isinstance(data, dict):
        raise InvalidInput("The request body must be a JSON object.")
    values = {}
    for key, check in _CHECKS.items():
        if key in data or (not partial and key in REQUIRED_FIELDS):
            values[key] = check(data.get(key), key)
    for key, check in _MONITOR_CHECKS.items():
        if key in data:
            values[key] = check(data[key], key)
    for key, check in _FLEET_CHECKS.items():
        if key in data:
            values[key] = check(data[key], key)
    return values


def cron_ids(data) -> tuple:
    """A body that is a list of cron ids, read by the one id-list rule (parse.parse_ids)."""
    return parse_ids(data)


def _fits(settings, cron: dict) -> None:
    """400 when the cron's crontab line could not be installed (see crontab.check_cron)."""
    if settings is None:
        return
    from qlshadow.host.crontab import CronTooLong, check_cron
    try:
        check_cron(settings, cron)
    except CronTooLong as exc:
        raise InvalidInput(str(exc)) from None


def create(data, settings=None, cron_id: int | None = None) -> dict:
    """Create a cron; with settings, refuse one whose crontab line cannot be installed.

    cron_id is the id a dry run of the same change got (cron_change.change): the crontab was
    installed with it.
    """
    values = validate(data, partial=False)
    _fits(settings, values)
    if "hosts" not in values:  # made on this host: it runs here only
        values["hosts"] = fleet.check_hosts([settings.host_name] if settings else [fleet.ALL])
    now = int(time.time())
    if cron_id is not None:
        values["id"] = cron_id
    cron_id = Cron.insert(created_at=now, updated_at=now, **values).execute()
    fleet.want_blocks(None, values)
    return get(cron_id)


def update(data, settings=None) -> dict:
    """Change a cron; with settings, refuse a change whose crontab line cannot be installed."""
    if not isinstance(data, dict):
        raise InvalidInput("The request body must be a JSON object.")
    cron_id = to_int(data.get("id"), 1, INT64_MAX)
    if cron_id is None:
        raise InvalidInput("'id' must be the positive integer id of the cron to change.")
    values = validate({k: v for k, v in data.items() if k != "id"}, partial=True)
    current = Cron.select().where(Cron.id == cron_id).dicts().get_or_none()
    if current is None:
        raise NotFound(f"Cron {cron_id} does not exist.")
    _fits(settings, {**current, **values})
    if values:
        # updated_at dates the definition (the gate and the health judge firings after
        # it): a change of how the cron is watched alone leaves it as it was.
        if any(key in DEFINITION_FIELDS for key in values):
            values["updated_at"] = int(time.time())
        Cron.update(**values).where(Cron.id == cron_id).execute()
        fleet.want_blocks(current, {**current, **values})
    return get(cron_id)


def require(ids: list) -> None:
    """NotFound naming the first id that has no cron."""
    found = {row[0] for row in Cron.select(Cron.id).where(Cron.id.in_(ids)).tuples()}
    missing = [cron_id for cron_id in ids if cron_id not in found]
    if missing:
        raise NotFound(f"Cron {missing[0]} does not exist.")


def delete(ids: list) -> int:
    """Delete crons and their instances; unknown ids are skipped (2.x)."""
    _want_blocks_of(ids)
    RunningInstance.delete().where(RunningInstance.cron.in_(ids)).execute()
    return Cron.delete().where(Cron.id.in_(ids)).execute()


def _want_blocks_of(ids: list) -> None:
    """The hosts these crons run on install their blocks again (core/fleet.py)."""
    for (hosts,) in Cron.select(Cron.hosts).where(Cron.id.in_(ids)).distinct().tuples():
        fleet.want_blocks(None, {"hosts": hosts})


def set_disabled(ids: list, disabled: bool) -> int:
    """Disable or enable crons; unknown ids are skipped (2.x)."""
    _want_blocks_of(ids)
    return (Cron.update(is_disabled=int(disabled), updated_at=int(time.time()))
            .where(Cron.id.in_(ids)).execute())


def get(cron_id: int) -> dict:
    """One cron in 2.x JSON, or NotFound."""
    row = Cron.select().where(Cron.id == cron_id).dicts().get_or_none()
    if row is None:
        raise NotFound(f"Cron {cron_id} does not exist.")
    return to_json(row)


def listing(page: int, size: int) -> dict:
    """One page of crons, newest first, with the total count."""
    query = Cron.select().order_by(Cron.id.desc())
    rows = query.paginate(page, size).dicts()
    return {"data": [to_json(r) for r in rows], "total": query.count()}


def to_json(row: dict) -> dict:
    """A cron row with the 2.x field names and codes."""
    extra = row["extra_schedules"]
    doc = {"id": row["id"]}
    doc.update((key, row[key]) for key in DEFINITION_FIELDS)
    doc.update({
        "extra_schedules": json.loads(extra) if extra is not None else None,
        "status": row["status"], "pid": row["pid"], "log_path": row["log_path"],
        "last_execution_time": row["last_execution_time"],
        "last_running_time": row["last_running_time"], "isDisabled": row["is_disabled"],
        "createdAt": row["created_at"], "updatedAt": row["updated_at"],
        "hosts": fleet.cron_hosts(row.get("hosts")), "hosts_mode": fleet.mode(row),
    })
    doc.update((key, row[key]) for key in TUNING_FIELDS)
    doc["snooze_until"] = snoozed_until(row["snooze_until"])
    return doc


def parse_until(value, key: str = "until"):
    """Epoch seconds of a snooze's end: an integer, or ISO text (`2026-12-05T07:00`, local
    time without a zone; `Z` or `+08:00` with one); None stays None (no snooze)."""
    if value is None:
        return None
    seconds = None
    if type(value) is int:
        seconds = value
    elif isinstance(value, str) and 10 <= len(value) <= 40 and value.isascii():
        import datetime
        try:
            when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            seconds = int(when.timestamp())  # naive: local time
        except (ValueError, OverflowError, OSError):
            seconds = None
    if seconds is None or not 0 <= seconds <= TIME_MAX:
        raise InvalidInput(f"'{key}' must be epoch seconds or an ISO date and time "
                           "(2026-12-05T07:00, local time unless it ends in Z or +08:00), "
                           "or null to end the snooze.")
    return seconds


def snooze(ids: list, until, now: int | None = None) -> list:
    """Snooze crons until `until` (epoch seconds; None ends a snooze now); NotFound naming
    the first unknown id, nothing changed then. Answers each cron's id, name and
    snooze_until (null when not snoozed).

    An ended snooze keeps its end (now, or the time it ran out) in the row: the alerts it
    held back are judged by it (watch/alerts/), and a cron never snoozed stays null.
    """
    from peewee import Case
    require(ids)
    now = int(time.time()) if now is None else now
    if until is None:
        value = Case(None, [(Cron.snooze_until > now, now)], Cron.snooze_until)
    else:
        value = until
    Cron.update(snooze_until=value).where(Cron.id.in_(ids)).execute()
    rows = Cron.select(Cron.id, Cron.name, Cron.snooze_until).where(Cron.id.in_(ids))
    return [{"id": i, "name": n, "snooze_until": snoozed_until(u, now)}
            for i, n, u in rows.order_by(Cron.id).tuples()]


def snoozed_until(stored, now: int | None = None):
    """The snooze's end while it lasts, else None (an ended one is kept in the row)."""
    now = int(time.time()) if now is None else now
    return stored if stored is not None and stored > now else None


def instances(cron_id: int, limit: int, host: str | None = None) -> list:
    """A cron's Legacy instances, newest first (of one host, by name)."""
    get(cron_id)
    return list_instances(cron_id, None, limit, None, host=host)


def list_instances(cron_id: int | None, status: int | None, limit: int, before: int | None,
                   since: int | None = None, until: int | None = None,
                   host: str | None = None) -> list:
    """Legacy instances of every cron (or one), newest first; before= (an instance id) pages on.

    since/until bound started_at (until excluded); status keeps one RunningInstance status
    (INSTANCE_ERROR: finished with a non-zero exit code).
    """
    query = RunningInstance.select()
    if cron_id is not None:
        query = query.where(RunningInstance.cron == cron_id)
    if status is not None:
        query = query.where(RunningInstance.status == status)
    if before is not None:
        query = query.where(RunningInstance.id < before)
    if since is not None:
        query = query.where(RunningInstance.started_at >= since)
    if until is not None:
        query = query.where(RunningInstance.started_at < until)
    if host is not None:  # the instances of one host (core/fleet.py)
        query = query.where(fleet.host_filter(RunningInstance.host_id, host))
    rows = query.order_by(RunningInstance.id.desc()).limit(limit).dicts()
    hosts = fleet.host_names()
    return [{"id": r["id"], "cron_id": r["cron"], "pid": r["pid"], "log_path": r["log_path"],
             "started_at": r["started_at"], "finished_at": r["finished_at"],
             "status": r["status"], "exit_code": r["exit_code"],
             "host": hosts.get(r["host_id"])} for r in rows]
