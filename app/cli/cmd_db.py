"""The database's commands: `db init`, `prune` (retention now) and `backup` (a snapshot)."""
from __future__ import annotations

import sys

from qlshadow import config
from qlshadow.cli.common import load_settings, print_json
from qlshadow.cli.errors import CliError
from qlshadow.core.auth import ensure_system_app
from qlshadow.storage import db


def cmd_db_init(args) -> int:
    settings = load_settings(args)
    database, journal = db.open_database(settings)
    ensure_system_app(database)
    print(f"database ready: {db.describe(database)}" + (f" ({journal})" if journal else ""))
    return 0


def cmd_prune(args) -> int:
    import time

    from qlshadow.storage import retention
    # On a full disk prune must not try to create anything before it frees space: the
    # reserve goes before the database is opened, and nothing is created (create=False).
    settings = load_settings(args)
    released = config.sqlite_file(settings.db_url) is not None and \
        retention.release_reserve(settings.data_dir)
    db.open_database(settings, create=False)
    print_json(retention.prune(settings, int(time.time()), released))
    return 0


def cmd_backup(args) -> int:
    """Snapshot the SQLite database (app/storage/backup.py); --keep-list rewrites a sysupgrade list."""
    import sqlite3

    from qlshadow.storage import backup, retention
    settings = load_settings(args, server=True)
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
