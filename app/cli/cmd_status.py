"""`status`: the health of every cron, problems first, its open executions and the storage
budget's use."""
from __future__ import annotations

import os
import sys

from qlshadow import config
from qlshadow.cli.common import load_settings, print_json
from qlshadow.cli.errors import CliError
from qlshadow.cli.textout import Column, table, terminal_width, when
from qlshadow.host import crontab
from qlshadow.storage import db


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
    settings = load_settings(args)
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
        print_json({"data": rows})
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
