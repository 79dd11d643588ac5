"""The qlshadow command: serve, db init, app, token, cron, crontab, runs, log, reconcile,
prune, backup, notify, accept-failures, import, adopt.

Every command prints one clear line on stderr and exits non-zero when it fails. Data
commands print a table for people (times in the box's local time, --utc for UTC) and
--json for scripts; commands that change something say what they did in one line.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from peewee import DatabaseError, IntegrityError, InterfaceError

from qlshadow import __version__, config
from qlshadow.service import cron_change, crons
from qlshadow.host import crontab
from qlshadow.storage import db
from qlshadow.core.auth import (RUNNER_APP, RUNNER_TOKEN_FILE, SYSTEM_APP, create_app_record,
                                ensure_system_app, runner_token, system_token)
from qlshadow.errors import QlError
from qlshadow.parse import INT64_MAX, to_int
from qlshadow.host.runner import start_manual
from qlshadow.core.shadow import reader
from qlshadow.cli.textout import Column, record, table, terminal_width, took, when


# An unexpected exception (a defect) exits with EX_SOFTWARE from sysexits.h: 1 stays the
# command's own "no" (the gate failed, a cron is unknown), 2 a usage mistake.
EXIT_INTERNAL = 70


class CliError(Exception):
    """A failure reported as one line on stderr."""


def _settings(args, server: bool = False) -> config.Settings:
    """The command's settings; a CLI command fills what it was not given from the server's
    record in the data dir, so that it installs the crontab exactly where the server does."""
    settings = config.load(config_file=args.config)
    # Before anything is made under the data dir (the dir itself, tokens, the database):
    # its disk may not be mounted yet.
    from qlshadow.storage.schema import check_mounted
    check_mounted(settings)
    read = settings.config_file
    if read and os.path.dirname(os.path.abspath(read)) == os.path.abspath(settings.data_dir):
        # runner.conf or notify.conf, which task.sh and the crontab's notify line name: ours,
        # and kept 0600.
        from qlshadow.files import make_private
        make_private(read)
    if server:
        return settings
    adopted = crontab.settings_to_adopt(settings)
    if not adopted:
        return settings
    return config.load(environ={**os.environ, **adopted}, config_file=args.config)


def _open(args, create: bool = True):
    """(settings, database) for a command; read-only commands pass create=False."""
    settings = _settings(args)
    database, _ = db.open_database(settings, create=create)
    return settings, database


def _print_json(data) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def cmd_serve(args) -> int:
    # Flask and waitress load only for serve: the other commands (a task's token refresh
    # among them) start faster and smaller without them.
    from qlshadow.core.runtime import watch_clock
    from qlshadow.web.serving import serve
    settings = _settings(args, server=True)
    watch_clock()  # clock steps, for the gate and health (runtime.py)
    return serve(settings)


def cmd_db_init(args) -> int:
    settings = _settings(args)
    database, journal = db.open_database(settings)
    with database.connection_context(), db.write_transaction():
        ensure_system_app()
    print(f"database ready: {db.describe(database)}" + (f" ({journal})" if journal else ""))
    return 0


def cmd_app_create(args) -> int:
    if args.name in (SYSTEM_APP, RUNNER_APP):
        raise CliError(f"the app name {args.name!r} is reserved for qlshadow's own tokens")
    _, database = _open(args)
    scopes = sorted({s.strip() for s in args.scopes.split(",") if s.strip()})
    try:
        with database.connection_context(), db.write_transaction():
            client_id, secret = create_app_record(args.name, scopes)
    except IntegrityError:
        raise CliError(f"an app named {args.name!r} already exists") from None
    _print_json({"name": args.name, "client_id": client_id, "client_secret": secret,
                 "scopes": scopes})
    return 0


def cmd_token_system(args) -> int:
    settings, database = _open(args)
    with database.connection_context(), db.write_transaction():
        system_token(settings.token_file)
    print(settings.token_file)
    return 0


def cmd_token_runner(args) -> int:
    settings, database = _open(args)
    with database.connection_context(), db.write_transaction():
        runner_token(settings.data_dir)
    print(os.path.join(settings.data_dir, RUNNER_TOKEN_FILE))
    return 0


def cmd_token_metrics(args) -> int:
    """Print a new scrape token that never expires, or (--revoke) revoke every one."""
    from qlshadow.core.auth import issue_metrics_token, revoke_metrics_tokens
    _, database = _open(args)
    try:
        with database.connection_context(), db.write_transaction():
            result = revoke_metrics_tokens() if args.revoke else issue_metrics_token()
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.revoke:
        print(f"revoked {result} metrics token(s); scrapes using them are refused within a minute")
    else:
        print(result)
    return 0


def _change(args, apply, create: bool = True):
    """Make a cron change only when the crontab that follows from it installs; one line on
    stderr says what was installed where (stdout stays the command's JSON). create=False:
    a change to existing crons, which a database not made yet cannot hold."""
    settings, database = _open(args, create)
    with database.connection_context():
        try:
            result, outcome = cron_change.change(settings, lambda planned: apply(settings, planned))
        except crontab.CrontabError as exc:
            raise CliError(f"the cron change was not made: {exc}") from None
    print(f"qlshadow: crontab: {outcome}", file=sys.stderr)
    return result


def _read(args, fn, *fn_args):
    """Run fn over a connection, creating nothing and taking no write lock."""
    _, database = _open(args, create=False)
    with database.connection_context():
        return fn(*fn_args)


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


def _cron_names(cron_ids) -> dict:
    """{cron id: name} of the crons with these ids, as stored now."""
    from qlshadow.storage.models import Cron
    wanted = list(set(cron_ids))
    if not wanted:
        return {}
    return dict(Cron.select(Cron.id, Cron.name).where(Cron.id.in_(wanted)).tuples())


def _named(ids) -> str:
    """'cron 1 (backup), cron 2 (sync)' for these ids."""
    names = _cron_names(ids)
    return ", ".join(f"cron {i} ({names[i]})" if i in names else f"cron {i}" for i in ids)


def _cron_ref(text: str):
    """A cron as the CLI takes it: its id (a number), or its name, looked up once the
    database is open (_cron_id)."""
    if text.isascii() and text.isdigit():
        return _positive(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("a cron is named by its id or its name, not by nothing")
    return text


def _cron_id(ref) -> int:
    """The id of a cron given by id or by name; an unknown or ambiguous name is a CliError."""
    if isinstance(ref, int):
        return ref
    from qlshadow.storage.models import Cron
    ids = [row[0] for row in Cron.select(Cron.id).where(Cron.name == ref)
           .order_by(Cron.id).limit(10).tuples()]
    if not ids:
        raise CliError(f"no cron is named {ref!r}; `qlshadow cron list` shows every cron's "
                       "id and name")
    if len(ids) > 1:
        raise CliError(f"{len(ids)} crons are named {ref!r} (ids "
                       f"{', '.join(map(str, ids))}); name the one you mean by its id")
    return ids[0]


def _cron_ids(refs) -> list:
    """The ids of crons given by id or name, each once, in the order given."""
    return list(dict.fromkeys(_cron_id(ref) for ref in refs))


def _health_of(settings, cron_id: int | None = None) -> dict:
    """{cron id: (health state, last exit code, how long its last execution took)}: the
    state word GET /open/crons/health and the page show (app/watch/health.py)."""
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
            _print_json(cron)
        else:
            print(f"added cron {cron['id']} ({cron['name']}) at {cron['schedule']}")
    elif args.cron_cmd == "list":
        settings, database = _open(args, create=False)
        with database.connection_context():
            listed = crons.listing(1, 10**6)["data"]
            found = {} if args.json or not listed else _health_of(settings)
        if args.json:
            _print_json(listed)
        elif not listed:
            print("no crons yet: add one with `qlshadow cron add SCHEDULE COMMAND`")
        else:
            sys.stdout.write(_cron_table(listed, args.utc, found))
    elif args.cron_cmd == "show":
        settings, database = _open(args, create=False)
        with database.connection_context():
            cron = crons.get(_cron_id(args.id))
            found = None if args.json else _health_of(settings, cron["id"]).get(cron["id"])
        if args.json:
            _print_json(cron)
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
        named = _change(args, lambda settings, planned: _existing(_cron_ids(args.ids), change)(),
                        create=False)
        print({"rm": "deleted", "enable": "enabled", "disable": "disabled"}[args.cron_cmd], named)
    elif args.cron_cmd == "edit":
        return cmd_cron_edit(args)
    elif args.cron_cmd == "run":
        # Starts a detached run outside any transaction (it only reads the cron).
        settings, database = _open(args, create=False)
        with database.connection_context():
            cron_id = _cron_id(args.id)
            started = start_manual(settings, [cron_id])
            named = _named(started)
        if args.json:
            _print_json(started)
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


def _max_runtime(text: str) -> int:
    """Seconds of --max-runtime (90, 30m, 2h, 1d), 0 for `none` (the usual stuck rule)."""
    from qlshadow.cli.timeparse import TimeError, parse_duration
    if text.strip().lower() == "none":
        return 0
    try:
        return parse_duration(text, "--max-runtime")
    except TimeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _quiet_option(text: str) -> str:
    """--quiet HH:MM-HH:MM, or "" for `none` (no quiet hours)."""
    from qlshadow.core.schedule import quiet_minutes
    if text.strip().lower() == "none":
        return ""
    if quiet_minutes(text.strip()) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not quiet hours; use HH:MM-HH:MM in "
                                         "local time (23:00-07:00 wraps midnight) or none")
    return text.strip()


def cmd_cron_edit(args) -> int:
    """Change how a cron is alerted on (alerting only: its crontab line stays as it is)."""
    data = _tuning_options(args)
    if not data:
        raise CliError("nothing to change: give --alert-after, --max-runtime or --quiet")
    _, database = _open(args)
    with database.connection_context(), db.write_transaction():
        cron = crons.update({"id": _cron_id(args.id), **data})
    if args.json:
        _print_json(cron)
    else:
        shown = ", ".join(f"{key} {cron[key] if cron[key] is not None else 'none'}"
                          for key in data)
        print(f"changed cron {cron['id']} ({cron['name']}): {shown}")
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
    _, database = _open(args)
    with database.connection_context(), db.write_transaction():
        ids = _cron_ids(args.crons)
        crons.require(ids)
        done = crons.snooze(ids, until, now)
    if args.json:
        _print_json(done)
        return 0
    for cron in done:
        what = (f"snoozed until {local_text(cron['snooze_until'])}" if cron["snooze_until"]
                else "not snoozed")
        print(f"cron {cron['id']} ({cron['name']}): {what}")
    return 0


def cmd_crontab(args) -> int:
    if args.remove:
        # No database needed: the block is found by its markers (the package's removal
        # scripts run this after the service has stopped).
        try:
            print(crontab.remove(_settings(args)))
        except crontab.CrontabError as exc:
            raise CliError(f"crontab block not removed: {exc}") from None
        return 0
    settings, database = _open(args, create=False)
    if args.print:
        with database.connection_context():
            sys.stdout.write(crontab.render(settings))
        return 0
    try:
        print(crontab.sync(settings))
    except crontab.CrontabError as exc:
        raise CliError(f"crontab not installed: {exc}") from None
    return 0


def cmd_import(args) -> int:
    """import qinglong PATH: QingLong's crons with their ids (qlimport.py); 1 if any refused."""
    from qlshadow.service import qlimport
    settings = _settings(args)
    _, source = qlimport.load(args.path)
    path = config.sqlite_file(settings.db_url)
    fresh = path is not None and not os.path.isfile(path)
    if args.dry_run and fresh:  # nothing to read, and a dry run creates nothing
        entries = qlimport.plan(settings, source, existing=False)
    else:
        database, _ = db.open_database(settings, create=not args.dry_run)
        with database.connection_context():
            entries = qlimport.plan(settings, source)
            if not args.dry_run and qlimport.pending(entries):
                try:
                    entries, outcome = cron_change.change(
                        settings, lambda planned: qlimport.apply(settings, source, planned))
                except crontab.CrontabError as exc:
                    raise CliError(f"nothing was imported: {exc}") from None
                print(f"qlshadow: crontab: {outcome}", file=sys.stderr)
    sys.stdout.write(import_report(entries, args.dry_run))
    return 1 if any(e["outcome"] == qlimport.REFUSED for e in entries) else 0


def import_report(entries: list, dry_run: bool) -> str:
    """The table of what was (or, dry, would be) imported, kept and refused, and a total."""
    from qlshadow.cli.textout import Column, table, terminal_width
    from qlshadow.service.qlimport import IMPORTED, KEPT, REFUSED
    word = {IMPORTED: "would import" if dry_run else IMPORTED, KEPT: KEPT, REFUSED: REFUSED}
    columns = [Column("qinglong id"), Column("id", right=True), Column("name", shrink=True),
               Column("outcome"), Column("reason", shrink=True)]
    rows = [[e["source"], e["id"], e["name"], word[e["outcome"]], e["reason"]] for e in entries]
    counts = {key: sum(e["outcome"] == key for e in entries) for key in word}
    total = (f"{word[IMPORTED]} {counts[IMPORTED]}, kept {counts[KEPT]}, refused "
             f"{counts[REFUSED]}" + ("; nothing was written (dry run)" if dry_run else ""))
    return (table(columns, rows, terminal_width()) if rows else "no crons in the file\n") + total + "\n"


def cmd_adopt(args) -> int:
    """adopt: list the crontab's own lines; adopt N...: make crons of them (app/service/adopt.py)."""
    from qlshadow.service import adopt
    settings = _settings(args)  # listing reads only the crontab, not the database
    try:
        listed = adopt.listing(settings)
        if not args.lines:
            columns = [Column("line", right=True), Column("schedule"), Column("command", shrink=True),
                       Column("adoptable", shrink=True)]
            rows = [[line.number, line.schedule, line.command or line.text,
                     "not: " + line.problem if line.problem else "yes"] for line in listed]
            if not listed:
                print("no lines of the crontab outside qlshadow's block")
            else:
                sys.stdout.write(table(columns, rows, terminal_width()))
            return 0
        lines = adopt.chosen(listed, args.lines)
        database, _ = db.open_database(settings, create=True)
        with database.connection_context():
            adopted, outcome = adopt.adopt(settings, lines, args.name)
    except crontab.CrontabError as exc:
        raise CliError(f"nothing was adopted: {exc}") from None
    print(f"qlshadow: crontab: {outcome}", file=sys.stderr)
    columns = [Column("line", right=True), Column("id", right=True), Column("name", shrink=True),
               Column("schedule"), Column("command", shrink=True)]
    sys.stdout.write(table(columns, [[line.number, cron["id"], cron["name"], cron["schedule"],
                                      cron["command"]] for line, cron in adopted],
                           terminal_width()))
    return 0


# RunningInstance.status codes as words (3: exited with a non-zero code), in code order.
INSTANCE_STATES = ("running", "finished", "stopped", "failed")


def _took(start, end) -> str | None:
    return took(end - start) if start is not None and end is not None else None


def _runs_table(listed: list, names: dict, utc: bool) -> str:
    columns = [Column("run"), Column("cron", right=True), Column("name", shrink=True),
               Column("started"), Column("state"), Column("exit", right=True),
               Column("took", right=True)]
    rows = [[r["id"], r["cron_id"], names.get(r["cron_id"]), when(r["accepted_at"], utc),
             _RUN_WORDS.get(r.get("condition"), r["state"]), r["exit_code"],
             _took(r["attempt"]["started_at"] or r["accepted_at"], r["finished_at"])]
            for r in listed]
    return table(columns, rows, terminal_width())


# A Run's state column: the word every surface gives it (watch/health.py's conditions).
_RUN_WORDS = {"running": "running", "stuck": "stuck", "finish_lost": "finish lost",
              "exited": "exited"}
# `runs --state` of Runs: the stored states, and the open Runs' conditions (running is the
# condition: an open Run within its time; stuck and finish_lost the others).
RUN_STATE_CHOICES = ("accepted", "spawned", "running", "stuck", "finish_lost", "exited")


_OPEN_PAGE = 256  # open Runs read at a time while looking for those of one condition


def _list_runs(args, settings) -> list:
    """Runs newest first, each with its condition; --state running, stuck or finish_lost
    keeps the open Runs of that condition (pages of open Runs read until enough match)."""
    import time

    from qlshadow.host.crond import kind_for
    from qlshadow.watch.health import with_conditions
    now, shadow, daemon = int(time.time()), settings.shadow_on, kind_for(settings)
    if args.state not in ("running", "stuck", "finish_lost"):
        listed = reader.list_runs(args.cron, args.state, args.limit, args.before,
                                  since=args.since, until=args.until, failed=args.failed,
                                  host=args.host)
        return with_conditions(listed, now, shadow, daemon)
    found, before = [], args.before
    while len(found) < args.limit:
        page = reader.list_runs(args.cron, "running", _OPEN_PAGE, before, since=args.since,
                                until=args.until, failed=args.failed, host=args.host)
        found += [r for r in with_conditions(page, now, shadow, daemon)
                  if r["condition"] == args.state]
        if len(page) < _OPEN_PAGE:
            break
        before = page[-1]["id"]
    return found[:args.limit]


def _instance_state(code: int) -> str:
    return INSTANCE_STATES[code] if 0 <= code < len(INSTANCE_STATES) else str(code)


def _instances_table(listed: list, names: dict, utc: bool) -> str:
    columns = [Column("instance", right=True), Column("cron", right=True),
               Column("name", shrink=True), Column("started"), Column("state"),
               Column("exit", right=True), Column("took", right=True)]
    rows = [[r["id"], r["cron_id"], names.get(r["cron_id"]), when(r["started_at"], utc),
             _instance_state(r["status"]), r["exit_code"], _took(r["started_at"], r["finished_at"])]
            for r in listed]
    return table(columns, rows, terminal_width())


def _with_hosts(text: str, listed: list) -> str:
    """The table with a host column when the rows ran on more than one host (a fleet)."""
    if len({r.get("host") for r in listed}) < 2:
        return text
    lines = text.splitlines()
    width = max(len(str(r.get("host") or "-")) for r in listed + [{"host": "host"}])
    head, rows = lines[:len(lines) - len(listed)], lines[len(lines) - len(listed):]
    out = [f"{line}  {'host' if i == len(head) - 1 else '':<{width}}".rstrip()
           for i, line in enumerate(head)]
    out += [f"{line}  {r.get('host') or '-'}" for line, r in zip(rows, listed, strict=True)]
    return "".join(f"{line}\n" for line in out)


def cmd_runs(args) -> int:
    """Executions newest first: Shadow Runs when Shadow is on, else (or --legacy) instances."""
    settings = _settings(args)
    legacy = args.legacy or not settings.shadow_on
    states = INSTANCE_STATES if legacy else RUN_STATE_CHOICES
    kind = "Legacy instances" if legacy else "Shadow Runs"
    if args.state is not None and args.state not in states:
        raise CliError(f"--state {args.state!r} is not a state of {kind}; use one of "
                       + ", ".join(states))
    if args.before is not None:
        if legacy and to_int(args.before, 1, INT64_MAX) is None:
            raise CliError("--before takes an instance id (a number) when instances are listed")
        if not legacy and not reader.UUID_TEXT.fullmatch(args.before):
            raise CliError("--before takes a run id (a lowercase UUID) when Runs are listed")
    _, database = _open(args, create=False)
    with database.connection_context():
        if args.cron is not None:
            args.cron = _cron_id(args.cron)
        if legacy:
            state = "failed" if args.failed else args.state
            listed = crons.list_instances(
                args.cron, None if state is None else INSTANCE_STATES.index(state), args.limit,
                None if args.before is None else int(args.before), args.since, args.until,
                host=args.host)
        else:
            listed = _list_runs(args, settings)
        names = {} if args.json else _cron_names(r["cron_id"] for r in listed)
    if args.json:
        # As `status` and `reconcile`: the API's document (GET /open/runs, or
        # /open/crons/ID/instances), its `data` under "data" (`jq .data` reads either).
        _print_json({"data": listed})
        return 0
    if not listed:
        hint = "" if legacy else " (manual runs are Legacy instances only: add --legacy)"
        print(f"no {'failed ' if args.failed else ''}{kind} match{hint}")
        return 0
    text = (_instances_table if legacy else _runs_table)(listed, names, args.utc)
    sys.stdout.write(_with_hosts(text, listed))
    if len(listed) == args.limit:
        print(f"more: add --before {listed[-1]['id']}")
    return 0


def cmd_accept_failures(args) -> int:
    """Shadow admissions that were refused or failed (failed jobs are `runs --failed`)."""
    if args.command == "failures":
        print("qlshadow: 'failures' is the old name of 'accept-failures'", file=sys.stderr)
    listed = _read(args, reader.list_failures, args.limit, args.before)
    if args.json:
        _print_json(listed)
    elif not listed:
        print("no Shadow accept failures (failed jobs: qlshadow runs --failed)")
    else:
        columns = [Column("id", right=True), Column("at"), Column("reason"),
                   Column("cron", right=True), Column("detail", shrink=True)]
        rows = [[f["id"], when(f["at"], args.utc), f["reason"], f["cron_id"], f["detail"]]
                for f in listed]
        sys.stdout.write(table(columns, rows, terminal_width()))
    return 0


def _log_source(args) -> tuple:
    """(what, stored log path, finished() -> bool) of the execution the options name."""
    from qlshadow.storage.models import Cron, RunningInstance, ShadowRun
    if args.cron is not None:
        args.cron = _cron_id(args.cron)
    if args.run_id is not None:
        run = reader.get_run(args.run_id) if reader.UUID_TEXT.fullmatch(args.run_id) else None
        if run is None:
            raise CliError(f"Run {args.run_id} does not exist")
        key = (ShadowRun.accepted_at == run["accepted_at"]) & (ShadowRun.id == run["id"])

        def run_finished() -> bool:
            row = ShadowRun.select(ShadowRun.finished_at).where(key).tuples().get_or_none()
            return row is None or row[0] is not None
        return f"Run {run['id']}", run["attempt"]["log_path"], run_finished
    if args.instance is not None:
        instance = RunningInstance.get_or_none(RunningInstance.id == args.instance)
        if instance is None:
            raise CliError(f"instance {args.instance} does not exist")
    else:
        crons.get(args.cron)
        instance = (RunningInstance.select().where(RunningInstance.cron == args.cron)
                    .order_by(RunningInstance.id.desc()).first())
        if instance is None:  # its instances were pruned: the cron keeps its last log path
            return f"cron {args.cron}", Cron.get_by_id(args.cron).log_path, lambda: True
    instance_id = instance.id

    def instance_finished() -> bool:
        row = (RunningInstance.select(RunningInstance.status)
               .where(RunningInstance.id == instance_id).tuples().get_or_none())
        return row is None or row[0] != 0
    return f"instance {instance_id}", instance.log_path, instance_finished


# Seconds between two looks at a followed log and its execution's state.
FOLLOW_POLL = 0.5


def cmd_log(args) -> int:
    """The last lines of an execution's task log; with -f, what it writes until it finishes."""
    import time

    from qlshadow.host import logs
    settings, database = _open(args, create=False)
    with database.connection_context():
        what, stored, finished = _log_source(args)
        if not stored:
            raise CliError(f"{what} has no log: its callbacks named none")
        try:
            fh = logs.open_log(settings.log_dir, stored)
        except logs.LogUnavailable as exc:
            raise CliError(f"{what}: {exc}") from None
        with fh:
            text, offset = logs.tail_lines(fh, args.lines)
            out = sys.stdout.buffer
            out.write(text)
            out.flush()
            if not args.follow:
                return 0
            # It ends at the first look after the execution finished that finds nothing new:
            # task.sh writes its last line before the idle callback, so none is missed.
            # Ctrl-C ends it too (main answers KeyboardInterrupt with exit 130).
            while True:
                done = finished()
                fh.seek(offset)
                chunk = fh.read()
                if chunk:
                    out.write(chunk)
                    out.flush()
                    offset += len(chunk)
                elif done:
                    return 0
                else:
                    time.sleep(FOLLOW_POLL)


GATE_EXIT = {"pass": 0, "fail": 1, "insufficient": 3}


def cmd_reconcile(args) -> int:
    """Read-only: no schema creation, no write transaction; exit 0 pass, 1 fail, 3 insufficient."""
    import os
    import time

    from qlshadow.watch.reconcile import ReconcileError, reconcile
    settings = _settings(args)
    path = config.sqlite_file(settings.db_url)
    if path is not None:
        if not os.path.isfile(path):  # connecting would create an empty file
            raise CliError(f"no database at {path} (QL_DB_URL); nothing to reconcile")
    database, _ = db.open_database(settings, create=False)
    now = int(time.time())
    until = now if args.until is None else args.until
    since = until - 7 * 86400 if args.since is None else args.since
    try:
        with database.connection_context():
            from qlshadow.host.crond import kind_for
            cron_id = None if args.cron is None else _cron_id(args.cron)
            data = reconcile(since, until, cron_id, args.stuck_after, now=now,
                             daemon=kind_for(settings))
    except ReconcileError as exc:
        print(f"qlshadow: {exc}", file=sys.stderr)
        return 2
    if args.json:
        _print_json({"data": data})  # the API document's data, as the endpoint answers it
    else:
        from qlshadow.cli.gate_report import format_report
        sys.stdout.write(format_report(data))
    return GATE_EXIT[data["gate"]["verdict"]]


def cmd_notify(args) -> int:
    """The tick (alerts.py), or with --test a test message through every channel."""
    from qlshadow.watch import notify  # only this command sends notifications: keep it off other paths
    sources = notify.load_sources(config_file=args.config)
    channels = notify.configured_channels(sources.values, sources.origin)
    if not args.test:
        return _notify_tick(args, channels)
    for line in notify.notes(sources):
        print(f"qlshadow: {line}", file=sys.stderr)
    if not channels:
        raise CliError("no notification channel is configured; docs/NOTIFY.md lists the "
                       "variables (WEBHOOK_URL, TG_BOT_TOKEN, SMTP_SERVER, ...)")
    _use_language(config.language(config_file=args.config))
    title, content = notify.test_message()
    failed = 0
    for channel in channels:
        result = notify.send(channel, title, content)
        print(f"{channel.name}: {'ok' if result.ok else 'FAILED'}: {result.reason} "
              f"(settings from {', '.join(channel.sources)})", flush=True)
        failed += not result.ok
    return 1 if failed else 0


def _use_language(lang: str) -> None:
    """Notifications and the reasons they carry in QL_LANG (the CLI's own text stays English)."""
    if lang != "en":
        from qlshadow import i18n
        i18n.set_default(lang)


def _notify_tick(args, channels: list) -> int:
    shared = not config.sqlite_file(config.load(config_file=args.config).db_url)
    if not channels and not shared:
        # Nothing to send: crond's every-minute tick costs a start-up and no more.
        if args.verbose:
            print(_no_channel_note(args))
        return 0
    from qlshadow.watch.alerts import tick
    settings = _settings(args)
    _use_language(settings.lang)
    database, _ = db.open_database(settings, create=False)
    # tick.sh says whether the service answered its request (watch/outage.py).
    answered = False if args.unanswered is not None else (True if args.answered else None)
    with database.connection_context():
        if shared:  # a fleet on one PostgreSQL: this host is alive, its block up to date
            from qlshadow.service import fleet
            try:
                fleet.tick(settings)
            except crontab.CrontabError as exc:
                print(f"qlshadow: crontab block not installed again: {exc}", file=sys.stderr)
        done = tick(settings, channels, answered=answered, why=args.unanswered or "")
    if args.verbose:
        print(" ".join(f"{key}={value}" for key, value in done.items()))
    return 0


def _no_channel_note(args) -> str:
    """What `notify -v` did with no channel: nothing, and where crond's tick finds its own."""
    said = "nothing was checked or sent: no notification channel is configured"
    read = args.config or os.environ.get("QL_CONFIG")
    if read:
        return f"{said} in {read} or the environment"
    try:
        conf = os.path.join(config.load().data_dir, crontab.NOTIFY_CONF)
    except config.ConfigError:
        conf = ""  # the settings' own mistake is for the commands that use them
    if conf and os.path.isfile(conf):
        return (f"{said} in the environment (no --config); crond's tick reads {conf}: "
                f"qlshadow notify -v --config {conf}")
    return f"{said} in the environment (no --config); docs/NOTIFY.md lists the variables"


_STATUS_COLUMNS = ((Column("cron", right=True), "cron_id"), (Column("name", shrink=True), "name"),
                   (Column("state"), "state"), (Column("since"), "since"),
                   (Column("next"), "next_expected"), (Column("last success"), "last_success"),
                   (Column("last start"), "last_start"), (Column("grace", right=True), "grace"),
                   (Column("reason", shrink=True), "reason"))
_STATUS_TIMES = ("since", "next_expected", "last_success", "last_start")


def cmd_status(args) -> int:
    """The health of every cron, problems first, as a table or (--json) the API's data."""
    import time

    from qlshadow.watch import health
    settings = _settings(args)
    path = config.sqlite_file(settings.db_url)
    if path is not None and not os.path.isfile(path):  # connecting would create an empty file
        raise CliError(f"no database at {path} (QL_DB_URL); no cron to report on")
    database, _ = db.open_database(settings, create=False)
    from qlshadow.host.crond import kind_for
    with database.connection_context():
        healths = health.read_all(int(time.time()),
                                  shadow="scheduled_system" in settings.shadow_origins,
                                  daemon=kind_for(settings))
        storage = None if args.json else _storage_line(settings)
    rows = [health.public(h) for h in healths]
    if crontab.install_state(settings) == "installed":
        from qlshadow.host.crond import NOT_RUNNING, crontab_words
        if crontab_words("installed") == NOT_RUNNING:  # every firing would count as missed
            print(f"qlshadow: crontab {NOT_RUNNING}: no firing of it will start",
                  file=sys.stderr)
    if args.json:
        _print_json({"data": rows})
        return 0

    # A snoozed or quiet cron is still judged: its state says so ("failed (quiet)").
    rows = [{**row, "state": f"{row['state']} ({health.alert_mark_text(row)})"}
            if health.alert_mark_text(row) else row for row in rows]
    sys.stdout.write(table([column for column, _ in _STATUS_COLUMNS],
                           [[when(row[key]) if key in _STATUS_TIMES else row[key]
                             for _, key in _STATUS_COLUMNS] for row in rows],
                           terminal_width()))
    if not rows:
        print("no crons")
    else:
        print(open_line(rows))
    print(storage)
    return 0


def _storage_line(settings) -> str:
    """The storage budget's use in one line, as /health counts it (retention.storage_use)."""
    from qlshadow.cli.textout import size
    from qlshadow.storage import retention
    policy = retention.policy_of(settings)
    if not policy.db_path:
        return (f"storage: task logs {size(retention.log_bytes(settings.log_dir))}; the "
                "database is PostgreSQL, which keeps its own files (no budget)")
    use = retention.storage_use(policy)
    used, budget = use["used_bytes"], use["budget_bytes"]
    if not budget:
        return f"storage: {size(used)} used, no budget set (QL_STORAGE_BUDGET)"
    return f"storage: {size(used)} of {size(budget)} ({100 * used / budget:.0f}%)"


def open_line(rows: list) -> str:
    """The open executions of every cron, as each surface words them (health.CONDITIONS)."""
    from qlshadow.watch.health import CONDITIONS
    total = {word: sum(row["open"][word] for row in rows) for word in CONDITIONS}
    return (f"open executions: {total['running']} running, {total['stuck']} stuck, "
            f"{total['finish_lost']} finish lost")


def cmd_prune(args) -> int:
    import time

    from qlshadow.storage import retention
    # On a full disk prune must not try to create anything before it frees space: the
    # reserve goes before the database is opened, and nothing is created (create=False).
    settings = _settings(args)
    released = config.sqlite_file(settings.db_url) is not None and \
        retention.release_reserve(settings.data_dir)
    db.open_database(settings, create=False)
    _print_json(retention.prune(settings, int(time.time()), released))
    return 0


def _tuning_arguments(q) -> None:
    q.add_argument("--alert-after", type=_alert_after, metavar="N",
                   help="send the failed alert only at the N-th failure in a row (1-1000)")
    q.add_argument("--max-runtime", type=_max_runtime, metavar="DURATION",
                   help="stuck when running longer than this (90, 30m, 2h); none: the usual rule")
    q.add_argument("--quiet", type=_quiet_option, metavar="HH:MM-HH:MM",
                   help="quiet hours every day, local time (23:00-07:00); none: no quiet hours")


def _alert_after(text: str) -> int:
    number = to_int(text, 1, 1000)
    if number is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of failures from 1 to 1000")
    return number


def _positive(text: str) -> int:
    # Ids are int64 in both databases: a larger number names nothing and cannot be bound.
    number = to_int(text, 1, INT64_MAX)
    if number is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a positive integer (at most {INT64_MAX})")
    return number


def _count(text: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(text)


def _time(text: str) -> int:
    """A time option's value (timeparse.parse_time); argparse names the option."""
    from qlshadow.cli.timeparse import TimeError, parse_time
    try:
        return parse_time(text)
    except TimeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _duration(text: str) -> int:
    from qlshadow.cli.timeparse import TimeError, parse_duration
    try:
        return parse_duration(text)
    except TimeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _output_options(p, json_help: str = "print JSON for scripts, not a table") -> None:
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--utc", action="store_true", help="show times in UTC, not the box's local time")


TIME_HELP = ("24h, 7d, 30m, 2026-11-30[T04:00], today, yesterday, 03:55 (today, local "
             "time), \"yesterday 22:00\" or epoch seconds")


CRON_HELP = "its id, or its name when one cron has it"


def cmd_backup(args) -> int:
    """Snapshot the SQLite database (app/storage/backup.py); --keep-list rewrites a sysupgrade list."""
    import sqlite3

    from qlshadow.storage import backup, retention
    settings = _settings(args, server=True)
    try:
        path = backup.snapshot(settings, args.path)
    except sqlite3.Error as exc:
        raise CliError(f"cannot snapshot the database: {exc}") from None
    if path is None:
        print("qlshadow: nothing to snapshot: the database is PostgreSQL (QL_DB_URL), "
              "which keeps it", file=sys.stderr)
    else:
        print(path)
    if args.keep_list:
        with open(args.keep_list, encoding="utf-8") as fh:
            listed = fh.read().splitlines()
        # The prune reserve is random bytes that every start remakes.
        kept = backup.keep_list(settings, listed, (retention.reserve_path(settings.data_dir),))
        text = "".join(f"{line}\n" for line in kept)
        with open(args.keep_list, "w", encoding="utf-8") as fh:
            fh.write(text)
    return 0


class _Parser(argparse.ArgumentParser):
    """Usage mistakes are one line on stderr too (`--help` still prints the usage)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="qlshadow", description="Legacy-compatible cron status service with Shadow Runs.",
        epilog="Exit status: 0 success; 1 the command failed or said no (one line on stderr); "
               f"2 a usage mistake; {EXIT_INTERNAL} an internal error (a defect: one line on "
               "stderr, please report it); 75 the data dir or the database would be created under a "
               "mount point not mounted yet. `reconcile` also exits 3 when the gate is insufficient.")
    parser.add_argument("--config", metavar="PATH",
                        help="KEY=VALUE config file (default: $QL_CONFIG); the environment wins")
    parser.add_argument("--version", action="version", version=f"qlshadow {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("serve", help="serve the HTTP API with waitress (one process)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("db", help="database commands")
    dbsub = p.add_subparsers(dest="db_cmd", required=True, metavar="SUBCOMMAND")
    dbsub.add_parser("init", help="create missing tables and the system app; never drops data"
                     ).set_defaults(func=cmd_db_init)

    p = sub.add_parser("app", help="API client apps")
    appsub = p.add_subparsers(dest="app_cmd", required=True, metavar="SUBCOMMAND")
    p = appsub.add_parser("create", help="create an app and print its client id and secret")
    p.add_argument("name")
    p.add_argument("--scopes", default="crons,runs", help="comma list of crons, runs, metrics")
    p.set_defaults(func=cmd_app_create)

    p = sub.add_parser("token", help="tokens for the shell scripts")
    toksub = p.add_subparsers(dest="token_cmd", required=True, metavar="SUBCOMMAND")
    toksub.add_parser("system", help="write a valid system token to $QL_DATA_DIR/token.json (0600)"
                      ).set_defaults(func=cmd_token_system)
    toksub.add_parser("runner", help="write a callback-only token for task.sh to "
                      "$QL_DATA_DIR/runner-token.json (0600)").set_defaults(func=cmd_token_runner)
    q = toksub.add_parser("metrics", help="print a new metrics-only token that never expires "
                          "(for GET /metrics); --revoke revokes every such token")
    q.add_argument("--revoke", action="store_true", help="revoke every metrics token instead")
    q.set_defaults(func=cmd_token_metrics)

    p = sub.add_parser("cron", help="manage crons")
    p.set_defaults(func=cmd_cron)
    cronsub = p.add_subparsers(dest="cron_cmd", required=True, metavar="SUBCOMMAND")
    q = cronsub.add_parser("add", help="add a cron")
    q.add_argument("schedule", help="5 or 6 cron fields, @once or @boot")
    q.add_argument("command", help="the task command")
    q.add_argument("--name", help="display name (default: the command)")
    _tuning_arguments(q)
    q.add_argument("--json", action="store_true", help="print the new cron as JSON")
    q.add_argument("--hosts", metavar="NAME,...",
                   help="the hosts it runs on (QL_HOST_NAME), or '*' for every host sharing "
                        "the database (default: this host)")
    q.add_argument("--hosts-mode", choices=("each", "one"),
                   help="each: every named host runs every firing (default); one: exactly "
                        "one of them runs each firing")
    q = cronsub.add_parser("list", help="list crons, newest first")
    _output_options(q)
    q = cronsub.add_parser("show", help="show one cron")
    q.add_argument("id", type=_cron_ref, metavar="CRON", help=CRON_HELP)
    _output_options(q)
    for name, text in (("rm", "delete crons"), ("enable", "enable crons"),
                       ("disable", "disable crons")):
        q = cronsub.add_parser(name, help=text)
        q.add_argument("ids", type=_cron_ref, nargs="+", metavar="CRON", help=CRON_HELP)
    q = cronsub.add_parser("run", help="run a cron now, detached (a manual run)")
    q.add_argument("id", type=_cron_ref, metavar="CRON", help=CRON_HELP)
    q.add_argument("--json", action="store_true", help="print the started ids as JSON")
    q = cronsub.add_parser("edit", help="change how a cron is alerted on "
                           "(docs/ALERTS.md, Tuning)")
    q.add_argument("id", type=_cron_ref, metavar="CRON", help=CRON_HELP)
    _tuning_arguments(q)
    q.add_argument("--json", action="store_true", help="print the changed cron as JSON")

    p = sub.add_parser("snooze", help="send no alert for crons until a time (still judged "
                       "and shown); --off ends it")
    p.add_argument("crons", type=_cron_ref, nargs="+", metavar="CRON", help=CRON_HELP)
    until = p.add_mutually_exclusive_group(required=True)
    until.add_argument("--for", dest="for_", metavar="DURATION", help="30m, 2h, 1d, 2w")
    until.add_argument("--until", metavar="TIME", help="2026-12-05T07:00 (local time), "
                       "...Z or +08:00, or epoch seconds")
    until.add_argument("--off", action="store_true", help="end the snooze now")
    p.add_argument("--json", action="store_true", help="print each cron's snooze as JSON")
    p.set_defaults(func=cmd_snooze)

    p = sub.add_parser("crontab", help="render qlshadow's block and install it in the crontab "
                       "(system mode)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--print", action="store_true", help="only print the block's content")
    what.add_argument("--remove", action="store_true", help="take qlshadow's block out of the "
                      "crontab, keeping every other line")
    p.set_defaults(func=cmd_crontab)

    p = sub.add_parser("import", help="import crons from another panel: qinglong PATH")
    q = p.add_subparsers(dest="import_from", required=True, metavar="SOURCE").add_parser(
        "qinglong", help="QingLong 2.x crons with their ids, from its data dir (db/database.sqlite "
        "or db/crontab.db) or that file; exits 1 if any cron was refused")
    q.add_argument("path", metavar="PATH")
    q.add_argument("--dry-run", action="store_true", help="print what would be done, write nothing")
    q.set_defaults(func=cmd_import)

    p = sub.add_parser("adopt", help="list the crontab's own lines (outside qlshadow's "
                       "block); with line numbers, make crons of them and take them out of "
                       "the user's part in the same install")
    p.add_argument("lines", type=_positive, nargs="*", metavar="LINE",
                   help="line numbers as the listing shows them")
    p.add_argument("--name", action="append", metavar="NAME", help="the name of the cron "
                   "made of each line, in order (default: the command's first words)")
    p.set_defaults(func=cmd_adopt)

    p = sub.add_parser("runs", help="list executions newest first: Shadow Runs, or Legacy "
                       "instances when Shadow is off (or with --legacy)")
    p.add_argument("--failed", action="store_true",
                   help="only executions that exited with a non-zero exit code")
    p.add_argument("--state", help="only this state: accepted, spawned, running, stuck, "
                   "finish_lost, exited (Runs: an open Run is running within its time, stuck "
                   "past it, finish_lost once a later one started); running, finished, "
                   "stopped, failed (instances)")
    p.add_argument("--since", type=_time, metavar="TIME", help="started at or after: " + TIME_HELP)
    p.add_argument("--until", type=_time, metavar="TIME", help="started before this time")
    p.add_argument("--host", metavar="NAME", help="only those that ran on this host (QL_HOST_NAME)")
    p.add_argument("--cron", type=_cron_ref, metavar="CRON",
                   help="only executions of this cron (" + CRON_HELP + ")")
    p.add_argument("--limit", type=_positive, default=50, help="at most this many (default 50)")
    p.add_argument("--before", metavar="ID", help="the next page: executions older than this "
                   "run id (or instance id), as the last line of a full page says")
    p.add_argument("--legacy", action="store_true",
                   help="list Legacy instances (every execution, manual runs too)")
    _output_options(p)
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("log", help="print the end of an execution's task log (-f: follow it)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("run_id", nargs="?", metavar="RUN_ID", help="a Shadow Run's id")
    which.add_argument("--instance", type=_positive, metavar="N", help="a Legacy instance's id")
    which.add_argument("--cron", type=_cron_ref, metavar="CRON",
                       help="this cron's latest execution (" + CRON_HELP + ")")
    p.add_argument("-n", "--lines", type=_count, default=50, metavar="N",
                   help="how many last lines (default 50)")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing what it writes until the execution has finished")
    p.set_defaults(func=cmd_log)

    p = sub.add_parser("reconcile", help="the reconciliation gate: do Shadow Runs match crond? "
                       "(exit 0 pass, 1 fail, 3 insufficient)")
    p.add_argument("--since", type=_time, metavar="TIME", help="window start: " + TIME_HELP
                   + " (default: 7 days before --until)")
    p.add_argument("--until", type=_time, metavar="TIME", help="window end, excluded "
                   "(default: now)")
    p.add_argument("--cron", type=_cron_ref, metavar="CRON", help="only this cron ("
                   + CRON_HELP + ")")
    p.add_argument("--stuck-after", type=_duration, default=None, metavar="DURATION",
                   help="a Run still running after this long counts as stuck: seconds, 30m, "
                   "2h (default: each cron's own limit, as `status` judges it)")
    p.add_argument("--json", action="store_true", help="print the JSON document, not a table")
    p.set_defaults(func=cmd_reconcile)
    p = sub.add_parser("prune", help="delete old Runs, instances, tokens and task logs now "
                       "(QL_RETENTION_*); print what was deleted")
    p.set_defaults(func=cmd_prune)

    p = sub.add_parser("backup", help="write a consistent copy of the SQLite database (the "
                       "online backup API; safe while serving) and print its path; on "
                       "PostgreSQL there is nothing to copy")
    p.add_argument("path", nargs="?", metavar="PATH",
                   help="where to write it (default: the database's path + .snapshot, which "
                   "a start restores when the database is missing)")
    p.add_argument("--keep-list", metavar="FILE",
                   help="also rewrite FILE, a list of paths to back up (sysupgrade's): add the "
                   "conf file and the data dir's files, with the snapshot in place of the "
                   "live database, its WAL and shared memory")
    p.set_defaults(func=cmd_backup)

    p = sub.add_parser("notify", help="the alert tick crond runs every minute: find missed and "
                       "stuck crons, send new events through every channel, retry failed "
                       "sends (docs/ALERTS.md); --test: a test message (docs/NOTIFY.md)")
    p.add_argument("--test", action="store_true",
                   help="send a test message through every configured channel; exit 0 when "
                   "every channel took it, 1 otherwise")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print what the tick did (found, queued, sent, retrying, given_up)")
    answer = p.add_mutually_exclusive_group()
    answer.add_argument("--unanswered", metavar="WHY",
                        help="the crontab's tick line did not reach the service (WHY: what it "
                        "saw): open an outage, told once (docs/ALERTS.md)")
    answer.add_argument("--answered", action="store_true",
                        help="the tick line reached the service, which did not tick: close "
                        "an open outage")
    p.set_defaults(func=cmd_notify)

    p = sub.add_parser("status", help="the health of every cron (ok, failed, late, missed, "
                       "stuck, running, new, paused), problems first")
    p.add_argument("--json", action="store_true", help="print the JSON document, not a table")
    p.set_defaults(func=cmd_status)

    for name in ("accept-failures", "failures"):
        # "failures" is the old name: it still works and says so on stderr.
        listed = {"help": "list Shadow accept failures (refused admissions, not failed jobs: "
                  "see runs --failed), newest first"} if name == "accept-failures" else {}
        p = sub.add_parser(name, **listed)
        p.add_argument("--limit", type=_positive, default=50)
        p.add_argument("--before", type=_positive, metavar="ID",
                       help="the next page: failures older than this id")
        _output_options(p)
        p.set_defaults(func=cmd_accept_failures)
    return parser


def main(argv=None) -> int:
    """Run the command line; returns the exit status."""
    # Files this process creates (database, WAL, tokens, crontab) are its user's only.
    os.umask(0o077)
    args = build_parser().parse_args(argv)
    try:
        status = args.func(args)
        sys.stdout.flush()  # here, where a closed pipe can still be caught
        return status
    except BrokenPipeError:
        # The reader left (`qlshadow runs | head -1`): stop quietly, as the signal module's
        # note on SIGPIPE shows: point stdout at /dev/null so that the flush at exit cannot
        # fail again, and exit as a command killed by SIGPIPE would (128 + 13).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt:
        return 128 + signal.SIGINT  # Ctrl-C (ending `log -f`, say): no traceback
    except (config.ConfigError, CliError, QlError) as exc:
        print(f"qlshadow: {exc}", file=sys.stderr)
        return getattr(exc, "exit_status", 1)  # 75: the data dir's disk is not mounted yet
    except (DatabaseError, InterfaceError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"qlshadow: database error: {first}", file=sys.stderr)
    except OSError as exc:
        print(f"qlshadow: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
    except Exception as exc:  # noqa: BLE001 - a defect: one line and its own code, not 1
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"qlshadow: internal error ({type(exc).__name__}{': ' + cause if cause else ''}); "
              "please report it", file=sys.stderr)
        return EXIT_INTERNAL
    return 1

