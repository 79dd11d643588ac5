"""The argument parser: every command, its options and its help. Each command names its
handler as "module:function" of this package, imported only when that command runs (cli/entry.py),
so that --help, --version and a usage mistake load no command's code."""
from __future__ import annotations

import argparse

from qlshadow import __version__
from qlshadow.cli.errors import EXIT_INTERNAL
from qlshadow.cli.options import (CRON_HELP, TIME_HELP, cron_ref, duration_value, output_options,
                                  positive_int, time_value, tuning_arguments, whole_number)


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
    p.set_defaults(handler="cmd_serve:cmd_serve")

    p = sub.add_parser("db", help="database commands")
    dbsub = p.add_subparsers(dest="db_cmd", required=True, metavar="SUBCOMMAND")
    dbsub.add_parser("init", help="create missing tables and the system app; never drops data"
                     ).set_defaults(handler="cmd_db:cmd_db_init")

    p = sub.add_parser("app", help="API client apps")
    appsub = p.add_subparsers(dest="app_cmd", required=True, metavar="SUBCOMMAND")
    p = appsub.add_parser("create", help="create an app and print its client id and secret")
    p.add_argument("name")
    p.add_argument("--scopes", default="crons,runs", help="comma list of crons, runs, metrics")
    p.set_defaults(handler="cmd_tokens:cmd_app_create")

    p = sub.add_parser("token", help="tokens for the shell scripts")
    toksub = p.add_subparsers(dest="token_cmd", required=True, metavar="SUBCOMMAND")
    toksub.add_parser("system", help="write a valid system token to $QL_DATA_DIR/token.json (0600)"
                      ).set_defaults(handler="cmd_tokens:cmd_token_system")
    toksub.add_parser("runner", help="write a callback-only token for task.sh to "
                      "$QL_DATA_DIR/runner-token.json (0600)"
                      ).set_defaults(handler="cmd_tokens:cmd_token_runner")
    q = toksub.add_parser("metrics", help="print a new metrics-only token that never expires "
                          "(for GET /metrics); --revoke revokes every such token")
    q.add_argument("--revoke", action="store_true", help="revoke every metrics token instead")
    q.set_defaults(handler="cmd_tokens:cmd_token_metrics")

    p = sub.add_parser("cron", help="manage crons")
    p.set_defaults(handler="cmd_crons:cmd_cron")
    cronsub = p.add_subparsers(dest="cron_cmd", required=True, metavar="SUBCOMMAND")
    q = cronsub.add_parser("add", help="add a cron")
    q.add_argument("schedule", help="5 or 6 cron fields, @once or @boot")
    q.add_argument("command", help="the task command")
    q.add_argument("--name", help="display name (default: the command)")
    tuning_arguments(q)
    q.add_argument("--json", action="store_true", help="print the new cron as JSON")
    q.add_argument("--hosts", metavar="NAME,...",
                   help="the hosts it runs on (QL_HOST_NAME), or '*' for every host sharing "
                        "the database (default: this host)")
    q.add_argument("--hosts-mode", choices=("each", "one"),
                   help="each: every named host runs every firing (default); one: exactly "
                        "one of them runs each firing")
    q = cronsub.add_parser("list", help="list crons, newest first")
    output_options(q)
    q = cronsub.add_parser("show", help="show one cron")
    q.add_argument("id", type=cron_ref, metavar="CRON", help=CRON_HELP)
    output_options(q)
    for name, text in (("rm", "delete crons"), ("enable", "enable crons"),
                       ("disable", "disable crons")):
        q = cronsub.add_parser(name, help=text)
        q.add_argument("ids", type=cron_ref, nargs="+", metavar="CRON", help=CRON_HELP)
    q = cronsub.add_parser("run", help="run a cron now, detached (a manual run)")
    q.add_argument("id", type=cron_ref, metavar="CRON", help=CRON_HELP)
    q.add_argument("--json", action="store_true", help="print the started ids as JSON")
    q = cronsub.add_parser("edit", help="change how a cron is alerted on "
                           "(docs/ALERTS.md, Tuning)")
    q.add_argument("id", type=cron_ref, metavar="CRON", help=CRON_HELP)
    tuning_arguments(q)
    q.add_argument("--json", action="store_true", help="print the changed cron as JSON")

    p = sub.add_parser("snooze", help="send no alert for crons until a time (still judged "
                       "and shown); --off ends it")
    p.add_argument("crons", type=cron_ref, nargs="+", metavar="CRON", help=CRON_HELP)
    until = p.add_mutually_exclusive_group(required=True)
    until.add_argument("--for", dest="for_", metavar="DURATION", help="30m, 2h, 1d, 2w")
    until.add_argument("--until", metavar="TIME", help="2026-12-05T07:00 (local time), "
                       "...Z or +08:00, or epoch seconds")
    until.add_argument("--off", action="store_true", help="end the snooze now")
    p.add_argument("--json", action="store_true", help="print each cron's snooze as JSON")
    p.set_defaults(handler="cmd_crons:cmd_snooze")

    p = sub.add_parser("crontab", help="render qlshadow's block and install it in the crontab "
                       "(system mode)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--print", action="store_true", help="only print the block's content")
    what.add_argument("--remove", action="store_true", help="take qlshadow's block out of the "
                      "crontab, keeping every other line")
    p.set_defaults(handler="cmd_crontab:cmd_crontab")

    p = sub.add_parser("import", help="import crons from another panel: qinglong PATH")
    q = p.add_subparsers(dest="import_from", required=True, metavar="SOURCE").add_parser(
        "qinglong", help="QingLong 2.x crons with their ids, from its data dir (db/database.sqlite "
        "or db/crontab.db) or that file; exits 1 if any cron was refused")
    q.add_argument("path", metavar="PATH")
    q.add_argument("--dry-run", action="store_true", help="print what would be done, write nothing")
    q.set_defaults(handler="cmd_import:cmd_import")

    p = sub.add_parser("adopt", help="list the crontab's own lines (outside qlshadow's "
                       "block); with line numbers, make crons of them and take them out of "
                       "the user's part in the same install")
    p.add_argument("lines", type=positive_int, nargs="*", metavar="LINE",
                   help="line numbers as the listing shows them")
    p.add_argument("--name", action="append", metavar="NAME", help="the name of the cron "
                   "made of each line, in order (default: the command's first words)")
    p.set_defaults(handler="cmd_crontab:cmd_adopt")

    p = sub.add_parser("runs", help="list executions newest first: Shadow Runs, or Legacy "
                       "instances when Shadow is off (or with --legacy)")
    p.add_argument("--failed", action="store_true",
                   help="only executions that exited with a non-zero exit code")
    p.add_argument("--state", help="only this state: accepted, spawned, running, stuck, "
                   "finish_lost, exited (Runs: an open Run is running within its time, stuck "
                   "past it, finish_lost once a later one started); running, finished, "
                   "stopped, failed (instances)")
    p.add_argument("--since", type=time_value, metavar="TIME", help="started at or after: " + TIME_HELP)
    p.add_argument("--until", type=time_value, metavar="TIME", help="started before this time")
    p.add_argument("--host", metavar="NAME", help="only those that ran on this host (QL_HOST_NAME)")
    p.add_argument("--cron", type=cron_ref, metavar="CRON",
                   help="only executions of this cron (" + CRON_HELP + ")")
    p.add_argument("--limit", type=positive_int, default=50, help="at most this many (default 50)")
    p.add_argument("--before", metavar="ID", help="the next page: executions older than this "
                   "run id (or instance id), as the last line of a full page says")
    p.add_argument("--legacy", action="store_true",
                   help="list Legacy instances (every execution, manual runs too)")
    output_options(p)
    p.set_defaults(handler="cmd_runs:cmd_runs")

    p = sub.add_parser("log", help="print the end of an execution's task log (-f: follow it)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("run_id", nargs="?", metavar="RUN_ID", help="a Shadow Run's id")
    which.add_argument("--instance", type=positive_int, metavar="N", help="a Legacy instance's id")
    which.add_argument("--cron", type=cron_ref, metavar="CRON",
                       help="this cron's latest execution (" + CRON_HELP + ")")
    p.add_argument("-n", "--lines", type=whole_number, default=50, metavar="N",
                   help="how many last lines (default 50)")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing what it writes until the execution has finished")
    p.set_defaults(handler="cmd_log:cmd_log")

    p = sub.add_parser("reconcile", help="the reconciliation gate: do Shadow Runs match crond? "
                       "(exit 0 pass, 1 fail, 3 insufficient)")
    p.add_argument("--since", type=time_value, metavar="TIME", help="window start: " + TIME_HELP
                   + " (default: 7 days before --until)")
    p.add_argument("--until", type=time_value, metavar="TIME", help="window end, excluded "
                   "(default: now)")
    p.add_argument("--cron", type=cron_ref, metavar="CRON", help="only this cron ("
                   + CRON_HELP + ")")
    p.add_argument("--stuck-after", type=duration_value, default=None, metavar="DURATION",
                   help="a Run still running after this long counts as stuck: seconds, 30m, "
                   "2h (default: each cron's own limit, as `status` judges it)")
    p.add_argument("--json", action="store_true", help="print the JSON document, not a table")
    p.set_defaults(handler="cmd_reconcile:cmd_reconcile")
    p = sub.add_parser("prune", help="delete old Runs, instances, tokens and task logs now "
                       "(QL_RETENTION_*); print what was deleted")
    p.set_defaults(handler="cmd_db:cmd_prune")

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
    p.set_defaults(handler="cmd_db:cmd_backup")

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
    p.set_defaults(handler="cmd_notify:cmd_notify")

    p = sub.add_parser("status", help="the health of every cron (ok, failed, late, missed, "
                       "stuck, running, new, paused), problems first")
    p.add_argument("--json", action="store_true", help="print the JSON document, not a table")
    p.set_defaults(handler="cmd_status:cmd_status")

    for name in ("accept-failures", "failures"):
        # "failures" is the old name: it still works and says so on stderr.
        listed = {"help": "list Shadow accept failures (refused admissions, not failed jobs: "
                  "see runs --failed), newest first"} if name == "accept-failures" else {}
        p = sub.add_parser(name, **listed)
        p.add_argument("--limit", type=positive_int, default=50)
        p.add_argument("--before", type=positive_int, metavar="ID",
                       help="the next page: failures older than this id")
        output_options(p)
        p.set_defaults(handler="cmd_runs:cmd_accept_failures")
    return parser
