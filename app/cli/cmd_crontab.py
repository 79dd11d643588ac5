"""The crontab: `crontab` (install, --print, --remove qlshadow's block) and `adopt` (the
crontab's own lines made crons)."""
from __future__ import annotations

import sys

from qlshadow.cli.common import load_settings, open_db
from qlshadow.cli.errors import CliError
from qlshadow.cli.textout import Column, table, terminal_width
from qlshadow.host import crontab
from qlshadow.storage import db


def cmd_crontab(args) -> int:
    if args.remove:
        # No database needed: the block is found by its markers (the package's removal
        # scripts run this after the service has stopped).
        try:
            print(crontab.remove(load_settings(args)))
        except crontab.CrontabError as exc:
            raise CliError(f"crontab block not removed: {exc}") from None
        return 0
    settings, database = open_db(args, create=False)
    if args.print:
        with database.connection_context():
            sys.stdout.write(crontab.render(settings))
        return 0
    try:
        print(crontab.sync(settings))
    except crontab.CrontabError as exc:
        raise CliError(f"crontab not installed: {exc}") from None
    return 0


def cmd_adopt(args) -> int:
    """adopt: list the crontab's own lines; adopt N...: make crons of them (app/service/adopt.py)."""
    from qlshadow.service import adopt
    settings = load_settings(args)  # listing reads only the crontab, not the database
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
