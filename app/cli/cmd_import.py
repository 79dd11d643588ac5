"""`import qinglong PATH`: QingLong's crons with their ids, and the report of what was done."""
from __future__ import annotations

import os
import sys

from qlshadow import config
from qlshadow.cli.common import load_settings
from qlshadow.cli.errors import CliError
from qlshadow.host import crontab
from qlshadow.service import cron_change
from qlshadow.storage import db


def cmd_import(args) -> int:
    """import qinglong PATH: QingLong's crons with their ids (qlimport.py); 1 if any refused."""
    from qlshadow.service import qlimport
    settings = load_settings(args)
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
