"""The qlshadow command: serve, db init, app, token, cron, crontab, runs, failures, reconcile,
prune.

Every command prints one clear line on stderr and exits non-zero when it fails.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from peewee import DatabaseError, IntegrityError, InterfaceError

from . import config, crons, crontab, db
from .auth import (RUNNER_TOKEN_FILE, create_app_record, ensure_system_app, runner_token,
                   system_token)
from .errors import QlError
from .runner import start_manual
from .shadow import reader


class CliError(Exception):
    """A failure reported as one line on stderr."""


def _settings(args) -> config.Settings:
    return config.load(config_file=args.config)


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
    from .serving import serve
    return serve(_settings(args))


def cmd_db_init(args) -> int:
    settings = _settings(args)
    database, journal = db.open_database(settings)
    with database.connection_context(), db.write_transaction():
        ensure_system_app()
    print(f"database ready: {db.describe(database)}" + (f" ({journal})" if journal else ""))
    return 0


def cmd_app_create(args) -> int:
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


def _write(args, fn, *fn_args, sync: bool = False):
    """Run fn in one write transaction; with sync, re-render and install the crontab after."""
    settings, database = _open(args)
    with database.connection_context(), db.write_transaction():
        result = fn(*fn_args)
    if sync:
        try:
            crontab.sync(settings)
        except crontab.CrontabError as exc:
            raise CliError(f"the cron change is saved, but the crontab is not: {exc}") from None
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


def cmd_cron(args) -> int:
    if args.cron_cmd == "add":
        data = {"name": args.name or args.command, "command": args.command,
                "schedule": args.schedule}
        _print_json(_write(args, crons.create, data, _settings(args), sync=True))
    elif args.cron_cmd == "list":
        _print_json(_read(args, crons.listing, 1, 10**6)["data"])
    elif args.cron_cmd == "show":
        _print_json(_read(args, crons.get, args.id))
    elif args.cron_cmd == "rm":
        _write(args, _existing(args.ids, crons.delete), sync=True)
    elif args.cron_cmd in ("enable", "disable"):
        _write(args, _existing(args.ids, crons.set_disabled), args.cron_cmd == "disable",
               sync=True)
    elif args.cron_cmd == "run":
        # Starts a detached run outside any transaction (it only reads the cron).
        settings, database = _open(args, create=False)
        with database.connection_context():
            _print_json(start_manual(settings, [args.id]))
    return 0


def cmd_crontab(args) -> int:
    settings, database = _open(args, create=False)
    if args.print:
        with database.connection_context():
            sys.stdout.write(crontab.render(settings))
        return 0
    try:
        print(crontab.sync(settings))
    except crontab.CrontabError:
        # The same words /health shows until an install succeeds.
        raise CliError(f"crontab {crontab.install_state(settings)}") from None
    return 0


def cmd_runs(args) -> int:
    _print_json(_read(args, reader.list_runs, args.cron, None, args.limit, None))
    return 0


def cmd_failures(args) -> int:
    _print_json(_read(args, reader.list_failures, args.limit, None))
    return 0


GATE_EXIT = {"pass": 0, "fail": 1, "insufficient": 3}


def cmd_reconcile(args) -> int:
    """Read-only: no schema creation, no write transaction; exit 0 pass, 1 fail, 3 insufficient."""
    import os
    import time

    from .reconcile import ReconcileError, reconcile
    settings = _settings(args)
    if settings.db_url.startswith("sqlite:///"):
        path = settings.db_url[len("sqlite:///"):].split("?", 1)[0]
        if not os.path.isfile(path):  # connecting would create an empty file
            raise CliError(f"no database at {path} (QL_DB_URL); nothing to reconcile")
    database, _ = db.open_database(settings, create=False)
    now = int(time.time())
    until = now if args.until is None else args.until
    since = until - 7 * 86400 if args.since is None else args.since
    try:
        with database.connection_context():
            data = reconcile(since, until, args.cron, args.stuck_after, now=now)
    except ReconcileError as exc:
        print(f"qlshadow: {exc}", file=sys.stderr)
        return 2
    if args.json:
        _print_json({"data": data})  # the API document's data, as the endpoint answers it
    else:
        sys.stdout.write(format_report(data))
    return GATE_EXIT[data["gate"]["verdict"]]


_COLUMNS = (("cron", "cron_id"), ("name", "name"), ("schedule", "schedule"),
            ("expected", "expected"), ("runs", "runs"), ("exited", "exited"),
            ("running", "running"), ("failed", "failed"), ("finish_only", "finish_only"),
            ("stuck", "stuck"), ("missed", "missed"), ("double", "double"),
            ("unmatched", "unmatched_instances"), ("drift", "drift"), ("invalid", "invalid"),
            ("verdict", "verdict"))


def format_report(data: dict) -> str:
    """The gate's report as a plain table, then the reasons."""
    import time

    def when(t):
        return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(t))

    def cell(report, key):
        value = report[key]
        if key in ("missed", "double"):
            return str(len(value) + report[key + "_omitted"])
        if key == "name" and len(value) > 24:
            return value[:23] + "~"
        return str(value)

    window, gate = data["window"], data["gate"]
    lines = [f"reconcile {when(window['since'])} .. {when(window['until'])}: "
             f"{gate['verdict'].upper()}"]
    rows = [[title for title, _ in _COLUMNS]]
    rows += [[cell(r, key) for _, key in _COLUMNS] for r in data["crons"]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    text_columns = {1, 2, len(_COLUMNS) - 1}
    for row in rows:
        lines.append("  ".join(v.ljust(w) if i in text_columns else v.rjust(w)
                               for i, (v, w) in enumerate(zip(row, widths))).rstrip())
    for r in data["crons"]:
        if r["definition_changed"]:
            lines.append(f"note: cron {r['cron_id']} changed its definition in or after the "
                         "window; firings are judged from "
                         + (when(r["evaluated_from"]) if r["evaluated_from"] else "nowhere"))
    if gate["failures"]:
        lines.append("accept failures: " + ", ".join(
            f"{reason} {count}" for reason, count in sorted(gate["failures"].items())))
    for reason in gate["reasons"]:
        lines.append(f"- {reason}")
    return "\n".join(lines) + "\n"


def cmd_prune(args) -> int:
    import time

    from . import retention
    # create=False: on a full disk prune must not try to create anything before it frees space.
    settings, database = _open(args, create=False)
    _print_json(retention.prune(settings, int(time.time())))
    return 0


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def _seconds(text: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds")
    return int(text)


class _Parser(argparse.ArgumentParser):
    """Usage mistakes are one line on stderr too (`--help` still prints the usage)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="qlshadow", description="Legacy-compatible cron status service with Shadow Runs.")
    parser.add_argument("--config", metavar="PATH",
                        help="KEY=VALUE config file (default: $QL_CONFIG); the environment wins")
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

    p = sub.add_parser("cron", help="manage crons")
    p.set_defaults(func=cmd_cron)
    cronsub = p.add_subparsers(dest="cron_cmd", required=True, metavar="SUBCOMMAND")
    q = cronsub.add_parser("add", help="add a cron")
    q.add_argument("schedule", help="5 or 6 cron fields, @once or @boot")
    q.add_argument("command", help="the task command")
    q.add_argument("--name", help="display name (default: the command)")
    cronsub.add_parser("list", help="list crons, newest first")
    q = cronsub.add_parser("show", help="show one cron")
    q.add_argument("id", type=_positive)
    for name, text in (("rm", "delete crons"), ("enable", "enable crons"),
                       ("disable", "disable crons")):
        q = cronsub.add_parser(name, help=text)
        q.add_argument("ids", type=_positive, nargs="+", metavar="ID")
    q = cronsub.add_parser("run", help="run a cron now, detached (a manual run)")
    q.add_argument("id", type=_positive)

    p = sub.add_parser("crontab", help="render the crontab and install it (system mode)")
    p.add_argument("--print", action="store_true", help="only print the rendering to stdout")
    p.set_defaults(func=cmd_crontab)

    p = sub.add_parser("runs", help="list Shadow Runs, newest first")
    p.add_argument("--cron", type=_positive, metavar="ID", help="only runs of this cron")
    p.add_argument("--limit", type=_positive, default=50)
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("reconcile", help="the reconciliation gate: do Shadow Runs match crond? "
                       "(exit 0 pass, 1 fail, 3 insufficient)")
    p.add_argument("--since", type=_seconds, metavar="S", help="window start, epoch seconds "
                   "(default: 7 days before --until)")
    p.add_argument("--until", type=_seconds, metavar="U", help="window end, epoch seconds, "
                   "excluded (default: now)")
    p.add_argument("--cron", type=_positive, metavar="ID", help="only this cron")
    p.add_argument("--stuck-after", type=_seconds, default=3600, metavar="SECONDS",
                   help="a Run still running after this long counts as stuck (default 3600)")
    p.add_argument("--json", action="store_true", help="print the JSON document, not a table")
    p.set_defaults(func=cmd_reconcile)
    p = sub.add_parser("prune", help="delete old Runs, instances, tokens and task logs now "
                       "(QL_RETENTION_*); print what was deleted")
    p.set_defaults(func=cmd_prune)

    p = sub.add_parser("failures", help="list Shadow accept failures, newest first")
    p.add_argument("--limit", type=_positive, default=50)
    p.set_defaults(func=cmd_failures)
    return parser


def main(argv=None) -> int:
    """Run the command line; returns the exit status."""
    # Files this process creates (database, WAL, tokens, crontab) are its user's only.
    os.umask(0o077)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (config.ConfigError, CliError, QlError) as exc:
        print(f"qlshadow: {exc}", file=sys.stderr)
    except (DatabaseError, InterfaceError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"qlshadow: database error: {first}", file=sys.stderr)
    except OSError as exc:
        print(f"qlshadow: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
