"""The qlshadow command: serve, db init, app, token, cron, crontab, runs, failures.

Every command prints one clear line on stderr and exits non-zero when it fails.
"""
from __future__ import annotations

import argparse
import json
import sys


class CliError(Exception):
    """A failure reported as one line on stderr."""


def _settings(args):
    from . import config
    return config.load(config_file=args.config)


def _open_db(settings, create: bool = True):
    """Bind the models to the configured database, creating missing tables."""
    import os

    from . import db
    database = db.make_database(settings.db_url, settings.db_timeout)
    db.bind(database)
    if db.is_sqlite(database):
        os.makedirs(os.path.dirname(os.path.abspath(database.database)), exist_ok=True)
    journal = db.create_schema() if create else ""
    return database, journal


def _print_json(data) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def _startup_crontab(settings) -> None:
    """Re-render the crontab at start-up so its lines call this server as configured now.

    Only once qlshadow owns a crontab file: installing replaces the user's whole crontab,
    so a first start with no crons must not wipe one that was there before us.
    """
    import os

    from .crontab import CrontabError, sync
    if not os.path.exists(settings.crontab_file):
        return
    try:
        sync(settings)
    except CrontabError as exc:
        print(f"qlshadow: warning: crontab not updated: {exc}", file=sys.stderr, flush=True)


def cmd_serve(args) -> int:
    import logging

    from waitress.server import create_server

    from . import create_app, db
    settings = _settings(args)
    app = create_app(settings)
    logging.basicConfig(level=logging.INFO, format="qlshadow: %(levelname)s %(name)s: %(message)s")
    # waitress warns "Task queue depth is N" for every queued request: a crond burst would
    # fill a router's log with them.
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    backstop = max(1024 * 1024, settings.max_body * 2)
    try:
        server = create_server(app, host=settings.host, port=settings.port, threads=settings.threads,
                               max_request_body_size=backstop, ident="qlshadow",
                               clear_untrusted_proxy_headers=True)
    except OSError as exc:
        raise CliError(f"cannot listen on {settings.host}:{settings.port}: "
                       f"{exc.strerror or exc}") from None
    if settings.port == 0:
        # Port 0 picks a free port: crontab lines and manual runs must call the real one.
        import dataclasses
        settings = dataclasses.replace(settings, port=server.effective_port)
        app.extensions["qlshadow"] = settings
    from .crontab import protect_data_dir
    protect_data_dir(settings)
    _startup_crontab(settings)
    journal = app.extensions["qlshadow.journal"]
    database = db.describe(db.database.obj) + (f" ({journal})" if journal else "")
    origins = ",".join(sorted(settings.shadow_origins)) or "off"
    print(f"qlshadow serving http://{settings.host}:{server.effective_port} database={database} "
          f"scheduler={settings.scheduler} shadow_origins={origins}", flush=True)
    if journal and journal != "wal":
        print(f"qlshadow: warning: SQLite journal mode is {journal}, not wal "
              "(the filesystem refused WAL)", file=sys.stderr, flush=True)
    # init scripts and procd stop the service with SIGTERM: leave the loop and close the
    # listening socket cleanly instead of dying mid-way, and exit 0.
    import signal
    signal.signal(signal.SIGTERM, _stop_serving)
    try:
        server.run()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.close()
    return 0


def _stop_serving(signum, frame) -> None:
    raise SystemExit(0)


def cmd_db_init(args) -> int:
    from . import db
    from .auth import ensure_system_app
    settings = _settings(args)
    database, journal = _open_db(settings)
    with database.connection_context(), db.write_transaction():
        ensure_system_app()
    print(f"database ready: {db.describe(database)}" + (f" ({journal})" if journal else ""))
    return 0


def cmd_app_create(args) -> int:
    from peewee import IntegrityError

    from . import db
    from .auth import create_app_record
    settings = _settings(args)
    database, _ = _open_db(settings)
    scopes = sorted({s.strip() for s in args.scopes.split(",") if s.strip()})
    try:
        with database.connection_context(), db.write_transaction():
            client_id, secret = create_app_record(args.name, scopes)
    except IntegrityError:
        raise CliError(f"an app named {args.name!r} already exists") from None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    _print_json({"name": args.name, "client_id": client_id, "client_secret": secret,
                 "scopes": scopes})
    return 0


def cmd_token_system(args) -> int:
    from . import db
    from .auth import system_token
    settings = _settings(args)
    database, _ = _open_db(settings)
    with database.connection_context(), db.write_transaction():
        token = system_token(settings.token_file)
    print(settings.token_file)
    return 0 if token else 1


def cmd_token_runner(args) -> int:
    from . import db
    from .auth import RUNNER_TOKEN_FILE, runner_token
    settings = _settings(args)
    database, _ = _open_db(settings)
    try:
        with database.connection_context(), db.write_transaction():
            runner_token(settings.data_dir)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    import os
    print(os.path.join(settings.data_dir, RUNNER_TOKEN_FILE))
    return 0


def _cron_call(args, fn, *fn_args, sync: bool = False):
    from . import db
    from .errors import ApiError
    settings = _settings(args)
    database, _ = _open_db(settings)
    try:
        with database.connection_context(), db.write_transaction():
            result = fn(*fn_args)
    except ApiError as exc:
        raise CliError(exc.message) from None
    if sync:
        from .crontab import CrontabError, sync as sync_crontab
        try:
            sync_crontab(settings)
        except CrontabError as exc:
            raise CliError(f"the cron change is saved, but the crontab is not: {exc}") from None
    return result


def _manual_run(args):
    """Start a detached run outside any transaction (it only reads the cron)."""
    from .errors import ApiError
    from .runner import start_manual
    settings = _settings(args)
    database, _ = _open_db(settings)
    try:
        with database.connection_context():
            return start_manual(settings, [args.id])
    except ApiError as exc:
        raise CliError(exc.message) from None


def cmd_cron(args) -> int:
    from . import crons
    if args.cron_cmd == "add":
        data = {"name": args.name or args.command, "command": args.command,
                "schedule": args.schedule}
        _print_json(_cron_call(args, crons.create, data, _settings(args), sync=True))
    elif args.cron_cmd == "list":
        _print_json(_cron_call(args, crons.listing, 1, 10**6)["data"])
    elif args.cron_cmd == "show":
        _print_json(_cron_call(args, crons.get, args.id))
    elif args.cron_cmd == "rm":
        _cron_call(args, crons.delete, args.ids, sync=True)
    elif args.cron_cmd in ("enable", "disable"):
        _cron_call(args, crons.set_disabled, args.ids, args.cron_cmd == "disable", sync=True)
    elif args.cron_cmd == "run":
        _print_json(_manual_run(args))
    return 0


def cmd_crontab(args) -> int:
    from . import crontab
    settings = _settings(args)
    database, _ = _open_db(settings)
    with database.connection_context():
        if args.print:
            sys.stdout.write(crontab.render(settings))
            return 0
    try:
        print(crontab.sync(settings))
    except crontab.CrontabError as exc:
        # The same words /health shows until an install succeeds.
        raise CliError(f"crontab {crontab.install_state(settings)}") from None
    return 0


def cmd_runs(args) -> int:
    from .shadow import reader
    settings = _settings(args)
    database, _ = _open_db(settings)
    with database.connection_context():
        _print_json(reader.list_runs(args.cron, None, args.limit, None))
    return 0


def cmd_failures(args) -> int:
    from .shadow import reader
    settings = _settings(args)
    database, _ = _open_db(settings)
    with database.connection_context():
        _print_json(reader.list_failures(args.limit, None))
    return 0


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
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
    p.add_argument("--scopes", default="crons,runs", help="comma list of crons, runs")
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

    p = sub.add_parser("failures", help="list Shadow accept failures, newest first")
    p.add_argument("--limit", type=_positive, default=50)
    p.set_defaults(func=cmd_failures)
    return parser


def main(argv=None) -> int:
    from peewee import DatabaseError, InterfaceError

    from .config import ConfigError
    import os
    # Files this process creates (database, WAL, tokens, crontab) are its user's only.
    os.umask(0o077)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, CliError) as exc:
        print(f"qlshadow: {exc}", file=sys.stderr)
    except (DatabaseError, InterfaceError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"qlshadow: database error: {first}", file=sys.stderr)
    except OSError as exc:
        print(f"qlshadow: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
