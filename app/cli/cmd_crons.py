"""Crons: `cron add|list|show|rm|enable|disable|run|edit` and `snooze`; a list shows each
cron's health state (app/watch/health/), a change installs the crontab that follows."""
from __future__ import annotations

import sys

from qlshadow.cli.common import cron_id_of, cron_ids_of, cron_names, open_db, print_json
from qlshadow.cli.errors import CliError
from qlshadow.cli.textout import Column, record, shown, table, terminal_width, took, when
from qlshadow.host import crontab
from qlshadow.host.runner import start_manual
from qlshadow.service import cron_change, crons
from qlshadow.storage import db


def _change(args, apply, create: bool = True):
    """Make a cron change only when the crontab that follows from it installs; one line on
    stderr says what was installed where (stdout stays the command's JSON). create=False:
    a change to existing crons, which a database not made yet cannot hold."""
    settings, database = open_db(args, create)
    with database.connection_context():
        try:
            result, outcome = cron_change.change(settings, lambda planned: apply(settings, planned))
        except crontab.CrontabError as exc:
            raise CliError(f"the cron change was not made: {exc}") from None
    print(f"qlshadow: crontab: {outcome}", file=sys.stderr)
    return result


def _existing(ids: list, change):
    """Apply change to ids after checking every one exists (the CLI names a missing id)."""
    def apply(*rest):
        crons.require(ids)
        return change(ids, *rest)
    return apply


# Cron.status codes as words; a disabled cron says so whatever its last status was.
def _cron_state(cron: dict) -> str:
    from qlshadow.storage.models import cron_status_word
    if cron["isDisabled"]:
        return "disabled"
    return cron_status_word(cron["status"])


def _named(ids) -> str:
    """'cron 1 (backup), cron 2 (sync)' for these ids."""
    names = cron_names(ids)
    return ", ".join(f"cron {i} ({shown(names[i])})" if i in names else f"cron {i}" for i in ids)


def _health_of(settings, cron_id: int | None = None) -> dict:
    """{cron id: (health state, last exit code, how long its last execution took)}: the
    state word GET /open/crons/health and the page show (app/watch/health/)."""
    import time

    from qlshadow.watch import health
    shadow = "scheduled_system" in settings.shadow_origins
    states = {h["cron_id"]: h["state"]
              for h in health.read_all(int(time.time()), shadow=shadow, cron_id=cron_id)}
    recent = health.recent_executions(list(states), shadow) if states else {}
    out = {}
    for cron_id, state in states.items():
        last = max((e for e in recent.get(cron_id, ()) if not e.open),
                   key=lambda e: e.start, default=None)
        span = None if last is None or last.end is None else max(0, last.end - last.start)
        out[cron_id] = (state, None if last is None else last.exit_code, span)
    return out


def _took_of(c: dict, found: tuple | None) -> str | None:
    """How long the cron's last execution ran: the duration task.sh measured, unless the
    execution's own start and end say it is not that one's (task.sh sends none for a run
    under a second, so the cron keeps an older run's); then those times."""
    if not c["last_execution_time"]:
        return None
    measured, span = c["last_running_time"], found[2] if found else None
    if span is not None and (measured is None or span < measured):
        return took(span)
    return took(measured) if measured is not None else None


def _cron_table(listed: list, utc: bool, found: dict) -> str:
    columns = [Column("id", right=True), Column("name", shrink=True), Column("schedule"),
               Column("state"), Column("exit", right=True), Column("last run"),
               Column("took", right=True), Column("command", shrink=True)]
    rows = [[c["id"], c["name"], c["schedule"], _state_of(c, found.get(c["id"])),
             found[c["id"]][1] if c["id"] in found else None,
             when(c["last_execution_time"], utc) if c["last_execution_time"] else None,
             _took_of(c, found.get(c["id"])), c["command"]] for c in listed]
    return table(columns, rows, terminal_width())


def _state_of(c: dict, found: tuple | None) -> str:
    """The health state word; a cron past health's cap (MAX_CRONS) says `unknown`."""
    return found[0] if found else "unknown"


def _cron_record(c: dict, utc: bool, found: tuple | None) -> str:
    extra = ", ".join(e["schedule"] for e in c["extra_schedules"] or [])
    last = c["last_execution_time"]
    return record([
        ("id", c["id"]), ("name", c["name"]), ("command", c["command"]),
        ("schedule", c["schedule"] + (f" (also {extra})" if extra else "")),
        ("state", _state_of(c, found)), ("process", _cron_state(c)),
        ("last run", when(last, utc) if last else None),
        ("last exit", found[1] if found else None), ("took", _took_of(c, found)),
        ("pid", c["pid"]), ("log", c["log_path"]), ("work_dir", c["work_dir"]),
        ("task_before", c["task_before"]), ("task_after", c["task_after"]),
        ("log_name", c["log_name"]),
        ("instances", "several at once" if c["allow_multiple_instances"] else "one at a time"),
        ("created", when(c["createdAt"], utc)), ("updated", when(c["updatedAt"], utc)),
    ]) + f"its latest log: qlshadow log --cron {c['id']}\n"


def cmd_cron(args) -> int:
    """cron add|list|show|rm|enable|disable|run: one line saying what was done, or the data."""
    if args.cron_cmd == "add":
        data = {"name": args.name or args.command, "command": args.command,
                "schedule": args.schedule, **_tuning_options(args)}
        if args.hosts is not None:  # a comma list; without it the cron runs on this host
            data["hosts"] = [name.strip() for name in args.hosts.split(",")]
        if args.hosts_mode is not None:
            data["hosts_mode"] = args.hosts_mode
        cron = _change(args, lambda settings, planned: crons.create(
            data, settings, planned and planned["id"]))
        if args.json:
            print_json(cron)
        else:
            print(f"added cron {cron['id']} ({shown(cron['name'])}) at {shown(cron['schedule'])}")
    elif args.cron_cmd == "list":
        settings, database = open_db(args, create=False)
        with database.connection_context():
            listed = crons.listing(1, 10**6)["data"]
            found = {} if args.json or not listed else _health_of(settings)
        if args.json:
            print_json(listed)
        elif not listed:
            print("no crons yet: add one with `qlshadow cron add SCHEDULE COMMAND`")
        else:
            sys.stdout.write(_cron_table(listed, args.utc, found))
    elif args.cron_cmd == "show":
        settings, database = open_db(args, create=False)
        with database.connection_context():
            cron = crons.get(cron_id_of(args.id))
            found = None if args.json else _health_of(settings, cron["id"]).get(cron["id"])
        if args.json:
            print_json(cron)
        else:
            sys.stdout.write(_cron_record(cron, args.utc, found))
    elif args.cron_cmd in ("rm", "enable", "disable"):
        def change(ids):
            named = _named(ids)  # read before the rows go
            if args.cron_cmd == "rm":
                crons.delete(ids)
            else:
                crons.set_disabled(ids, args.cron_cmd == "disable")
            return named
        named = _change(args, lambda settings, planned: _existing(cron_ids_of(args.ids), change)(),
                        create=False)
        print({"rm": "deleted", "enable": "enabled", "disable": "disabled"}[args.cron_cmd], named)
    elif args.cron_cmd == "edit":
        return cmd_cron_edit(args)
    elif args.cron_cmd == "run":
        # Starts a detached run outside any transaction (it only reads the cron).
        settings, database = open_db(args, create=False)
        with database.connection_context():
            cron_id = cron_id_of(args.id)
            started = start_manual(settings, [cron_id])
            named = _named(started)
        if args.json:
            print_json(started)
        else:
            # task.sh names the file when it starts: the log command finds it then.
            print(f"started {named} as a manual run; its log: qlshadow log --cron {cron_id} -f")
    return 0


# --- alert tuning: cron add/edit's options, `snooze` ---------------------------------------

def _tuning_options(args) -> dict:
    """The alert tuning a `cron add` or `cron edit` was given, as the API's fields."""
    out = {}
    if args.alert_after is not None:
        out["alert_after"] = args.alert_after
    if args.max_runtime is not None:
        out["max_runtime"] = args.max_runtime or None
    if args.quiet is not None:
        out["quiet"] = args.quiet or None
    return out


def cmd_cron_edit(args) -> int:
    """Change how a cron is alerted on (alerting only: its crontab line stays as it is)."""
    data = _tuning_options(args)
    if not data:
        raise CliError("nothing to change: give --alert-after, --max-runtime or --quiet")
    _, database = open_db(args)
    with database.connection_context(), db.write_transaction():
        cron = crons.update({"id": cron_id_of(args.id), **data})
    if args.json:
        print_json(cron)
    else:
        changed = ", ".join(f"{key} {cron[key] if cron[key] is not None else 'none'}"
                            for key in data)
        print(f"changed cron {cron['id']} ({shown(cron['name'])}): {changed}")
    return 0


def cmd_snooze(args) -> int:
    """Snooze crons' alerts --for a while or --until a time; --off ends it."""
    import time

    from qlshadow.cli.timeparse import TimeError, parse_duration, parse_time
    from qlshadow.timefmt import local_text
    now = int(time.time())
    try:
        if args.off:
            until = None
        elif args.for_ is not None:
            until = now + parse_duration(args.for_, "--for")
        else:
            until = parse_time(args.until, "--until", now)
    except TimeError as exc:
        raise CliError(str(exc)) from None
    if until is not None and until <= now:
        raise CliError(f"--until: {args.until!r} is not in the future")
    _, database = open_db(args)
    with database.connection_context(), db.write_transaction():
        ids = cron_ids_of(args.crons)
        crons.require(ids)
        done = crons.snooze(ids, until, now)
    if args.json:
        print_json(done)
        return 0
    for cron in done:
        what = (f"snoozed until {local_text(cron['snooze_until'])}" if cron["snooze_until"]
                else "not snoozed")
        print(f"cron {cron['id']} ({shown(cron['name'])}): {what}")
    return 0
