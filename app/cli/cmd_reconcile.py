"""`reconcile`: the reconciliation gate over a window, as a report or JSON; its verdict is
the exit status."""
from __future__ import annotations

import sys

from qlshadow import config
from qlshadow.cli.common import cron_id_of, load_settings, print_json
from qlshadow.cli.errors import CliError
from qlshadow.storage import db


GATE_EXIT = {"pass": 0, "fail": 1, "insufficient": 3}


def cmd_reconcile(args) -> int:
    """Read-only: no schema creation, no write transaction; exit 0 pass, 1 fail, 3 insufficient."""
    import os
    import time

    from qlshadow.watch.reconcile import ReconcileError, reconcile
    settings = load_settings(args)
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
            cron_id = None if args.cron is None else cron_id_of(args.cron)
            data = reconcile(since, until, cron_id, args.stuck_after, now=now,
                             daemon=kind_for(settings))
    except ReconcileError as exc:
        print(f"qlshadow: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print_json({"data": data})  # the API document's data, as the endpoint answers it
    else:
        from qlshadow.cli.gate_report import format_report
        sys.stdout.write(format_report(data))
    return GATE_EXIT[data["gate"]["verdict"]]
