"""The qlshadow command: serve, db init, app, token, cron, crontab, runs, failures, reconcile,
prune.

Every command prints one clear line on stderr and exits non-zero when it fails.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys

from peewee import DatabaseError, IntegrityError, InterfaceError

from . import config, crons, crontab, db
from .auth import (RUNNER_TOKEN_FILE, create_app_record, ensure_system_app, runner_token,
                   system_token)
from .errors import QlError
from .parse import parse_ids
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


def _startup_crontab(settings) -> None:
    """Re-render the crontab at start-up so its lines call this server as configured now.

    Only once qlshadow owns a crontab file: installing replaces the user's whole crontab,
    so a first start with no crons must not wipe one that was there before us.
    """
    if not os.path.exists(settings.crontab_file):
        return
    try:
        crontab.sync(settings)
    except crontab.CrontabError as exc:
        print(f"qlshadow: warning: crontab not updated: {exc}", file=sys.stderr, flush=True)


# Seconds a thread may hold the GIL while another waits for it (Python's default: 0.005).
# Each SQLite call releases the GIL; when a waitress thread that is parsing a request takes
# it, the writer waits for the rest of that thread's interval before its next statement.
# 0.5 ms bounds that wait at a tenth; it changes only when threads are forced to take turns
# (never correctness: every shared structure here is behind a lock or the database), and
# its cost, more frequent hand-offs, is measured in docs/PERFORMANCE.md.
SWITCH_INTERVAL = 0.0005
# With more than one request thread on SQLite, writes run on one writer thread
# (db.start_writer); with one (the SQLite default) they run inline, which saves two thread
# hand-offs per callback. The bench turns the writer off to compare.
WRITER_THREAD = True


def cmd_serve(args) -> int:
    # Flask and waitress load only for serve: the other commands (a task's token refresh
    # among them) start faster and smaller without them.
    from .serving import make_server
    from .views import create_app
    settings = _settings(args)
    app = create_app(settings)
    # A short GIL switch interval (see SWITCH_INTERVAL): set once, for this process only.
    sys.setswitchinterval(SWITCH_INTERVAL)
    if WRITER_THREAD and settings.threads > 1 and db.is_sqlite():
        db.start_writer()
    handler = logging.StreamHandler()
    handler.setFormatter(_LogFormat())
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    # waitress warns "Task queue depth is N" for every queued request: a crond burst would
    # fill a router's log with them.
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    backstop = max(1024 * 1024, settings.max_body * 2)
    try:
        socket.getaddrinfo(settings.host, settings.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise CliError(f"QL_HOST={settings.host!r} does not resolve to an address: {reason}") from None
    try:
        server = make_server(app, settings.threads, host=settings.host,
                             port=settings.port, max_request_body_size=backstop,
                             ident="qlshadow", clear_untrusted_proxy_headers=True)
    except OSError as exc:
        # A name that does not resolve, an address this host does not have, a port in use.
        reason = exc.strerror or str(exc)
        raise CliError(f"cannot listen on {settings.host}:{settings.port} (QL_HOST/QL_PORT): "
                       f"{reason}") from None
    if settings.port == 0:
        # Port 0 picks a free port: crontab lines and manual runs must call the real one.
        settings = config.with_port(settings, server.effective_port)
        app.extensions["qlshadow"] = settings
    from .crontab import protect_data_dir
    protect_data_dir(settings)
    _startup_crontab(settings)
    journal = app.extensions["qlshadow.journal"]
    database = db.describe(db.database.obj) + (f" ({journal})" if journal else "")
    origins = ",".join(sorted(settings.shadow_origins)) or "off"
    print(f"qlshadow serving http://{settings.host}:{server.effective_port} database={database} "
          f"scheduler={settings.scheduler} shadow_origins={origins} threads={settings.threads}",
          flush=True)
    if journal and journal != "wal":
        print(f"qlshadow: warning: SQLite journal mode is {journal}, not wal "
              "(the filesystem refused WAL)", file=sys.stderr, flush=True)
    # init scripts and procd stop the service with SIGTERM: leave the loop and close the
    # listening socket cleanly instead of dying mid-way, and exit 0.
    signal.signal(signal.SIGTERM, _stop_serving)
    try:
        server.run()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.close()
    return 0


class _LogFormat(logging.Formatter):
    """One prefix per server line, like the CLI's: 'qlshadow: warning: ...'.

    Our own loggers add nothing more; another library's line names it once.
    """

    def format(self, record: logging.LogRecord) -> str:
        source = "" if record.name.split(".")[0] == "qlshadow" else f"{record.name}: "
        level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        text = f"qlshadow: {level}{source}{record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def _stop_serving(signum, frame) -> None:
    raise SystemExit(0)


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


def cmd_token_metrics(args) -> int:
    """Print a new scrape token that never expires, or (--revoke) revoke every one."""
    from .auth import issue_metrics_token, revoke_metrics_tokens
    _, database = _open(args)
    try:
        with database.connection_context(), db.write_transaction():
            result = revoke_metrics_tokens() if args.revoke else issue_metrics_token()
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.revoke:
        print(f"revoked {result} metrics token(s); scrapes using them get 401 within a minute")
    else:
        print(result)
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
        _write(args, _existing(parse_ids(args.ids, "ID"), crons.delete), sync=True)
    elif args.cron_cmd in ("enable", "disable"):
        _write(args, _existing(parse_ids(args.ids, "ID"), crons.set_disabled),
               args.cron_cmd == "disable", sync=True)
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
            data = reconcile(since, until, args.cron, args.stuck_after, now=now)
    except ReconcileError as exc:
        print(f"qlshadow: {exc}", file=sys.stderr)
        return 2
    if args.json:
        _print_json({"data": data})  # the API document's data, as the endpoint answers it
    else:
        from .gate_report import format_report
        sys.stdout.write(format_report(data))
    return GATE_EXIT[data["gate"]["verdict"]]


def cmd_notify(args) -> int:
    """Send a test message through every configured notification channel, one line each."""
    from . import notify  # only this command sends notifications: keep it off other paths
    channels = notify.configured_channels(notify.load_settings(config_file=args.config))
    if not channels:
        raise CliError("no notification channel is configured; docs/NOTIFY.md lists the "
                       "variables (WEBHOOK_URL, TG_BOT_TOKEN, SMTP_SERVER, ...)")
    title, content = notify.test_message()
    failed = 0
    for channel in channels:
        result = notify.send(channel, title, content)
        print(f"{channel.name}: {'ok' if result.ok else 'FAILED'}: {result.reason}", flush=True)
        failed += not result.ok
    return 1 if failed else 0


_STATUS_COLUMNS = (("cron", "cron_id"), ("name", "name"), ("state", "state"),
                   ("since", "since"), ("next", "next_expected"),
                   ("last success", "last_success"), ("last start", "last_start"),
                   ("grace", "grace"), ("reason", "reason"))


def cmd_status(args) -> int:
    """The health of every cron, problems first, as a table or (--json) the API's data."""
    import time

    from . import health
    settings = _settings(args)
    path = config.sqlite_file(settings.db_url)
    if path is not None and not os.path.isfile(path):  # connecting would create an empty file
        raise CliError(f"no database at {path} (QL_DB_URL); no cron to report on")
    database, _ = db.open_database(settings, create=False)
    with database.connection_context():
        healths = health.read_all(int(time.time()),
                                  shadow="scheduled_system" in settings.shadow_origins)
    rows = [health.public(h) for h in healths]
    if args.json:
        _print_json({"data": rows})
        return 0

    def cell(row: dict, key: str) -> str:
        value = row[key]
        if value is None:
            return "-"
        if key in ("since", "next_expected", "last_success", "last_start"):
            return time.strftime("%Y-%m-%d %H:%M", time.localtime(value))
        if key == "name" and len(value) > 24:
            return value[:23] + "~"
        return str(value)

    table = [[title for title, _ in _STATUS_COLUMNS]]
    table += [[cell(row, key) for _, key in _STATUS_COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(_STATUS_COLUMNS))]
    for line in table:
        print("  ".join(v.rjust(w) if i in (0, 7) else v.ljust(w)
                        for i, (v, w) in enumerate(zip(line, widths))).rstrip())
    if not rows:
        print("no crons")
    return 0


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

    p = sub.add_parser("notify", help="notification channels (docs/NOTIFY.md); exit 0 when "
                       "every channel took the message, 1 otherwise")
    p.add_argument("--test", action="store_true", required=True,
                   help="send a test message through every configured channel")
    p.set_defaults(func=cmd_notify)

    p = sub.add_parser("status", help="the health of every cron (ok, failed, late, missed, "
                       "stuck, running, new, paused), problems first")
    p.add_argument("--json", action="store_true", help="print the JSON document, not a table")
    p.set_defaults(func=cmd_status)

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
