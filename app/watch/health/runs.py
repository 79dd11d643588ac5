"""Open Runs as every surface words them: each Run's condition, from its cron's stuck limit
and whether crond started the cron again after it (no Flask).
"""
from __future__ import annotations

from qlshadow.storage.models import Cron, database
from qlshadow.watch.health.cache import Schedules
from qlshadow.watch.health.conditions import STUCK_DEFAULT, condition, overlaps, stuck_limit
from qlshadow.watch.health.facts import NO_FIRINGS
from qlshadow.watch.health.missed import GRACE_MAX, default_grace
from qlshadow.watch.health.reads import RECENT, recent_executions

# The first Run of a cron after an instant: shadow_runs_cron (cron_id, accepted_at, id) alone
# answers it.
_LATER_RUN = ('SELECT MIN("accepted_at") FROM "shadow_runs" WHERE "cron_id" = {q} '
              'AND "accepted_at" > {q}')
# The same on one host: host_id is not in shadow_runs_cron, so the seek reads the Runs that
# follow in its order, at most {n} of them (HOST_LOOKAHEAD per recorded host), each looked up.
_LATER_HOST_RUN = ('SELECT MIN("accepted_at") FROM (SELECT "accepted_at", "host_id" '
                   'FROM "shadow_runs" WHERE "cron_id" = {q} AND "accepted_at" > {q} '
                   'ORDER BY "accepted_at", "id" LIMIT {n}) AS "later" WHERE "host_id" = {q}')
HOST_LOOKAHEAD = RECENT  # Runs read after an open one, per recorded host


def stuck_limits(ids: list, now: int, shadow: bool = True) -> dict:
    """{cron_id: seconds} after which an open execution of each cron is stuck, as health
    judges it (stuck_limit over its recent executions and its grace)."""
    from qlshadow.watch.firing_times import is_active
    ids = sorted(set(ids))
    if not ids:
        return {}
    crons = {c["id"]: c for c in Cron.select().where(Cron.id.in_(ids)).dicts()}
    recent = recent_executions(list(crons), shadow)
    schedules = Schedules(now)
    limits = {}
    for cron_id in ids:
        cron = crons.get(cron_id)
        if cron is None:  # deleted: its Runs are judged by the default limit
            limits[cron_id] = max(STUCK_DEFAULT, GRACE_MAX)
            continue
        grace = cron.get("grace")
        if grace is None:
            grace = default_grace(schedules.around(cron["schedule"]) if is_active(cron)
                                  else NO_FIRINGS)
        limits[cron_id] = stuck_limit(recent[cron_id], grace, cron.get("max_runtime"))[0]
    return limits


def later_run(cron_id: int, after: int, host: int | None = None,
              hosts: int = 1) -> int | None:
    """When the cron's first Run after the instant was accepted, or None.

    host: only a Run of that host counts (crond starts a line again only on its own host,
    after its previous run there ended), looked for among the next HOST_LOOKAHEAD x hosts
    Runs of the cron (hosts: how many the fleet recorded); None (SQLite, or a Run from
    before the fleet): any Run counts."""
    q = database.obj.param
    if host is None:
        sql, params = _LATER_RUN.format(q=q), (cron_id, after)
    else:
        sql = _LATER_HOST_RUN.format(q=q, n=HOST_LOOKAHEAD * max(hosts, 1))
        params = (cron_id, after, host)
    row = database.obj.execute_sql(sql, params).fetchone()
    return row[0] if row and row[0] is not None else None


def host_ids(runs: list) -> dict:
    """{host name: id} of a fleet of several hosts, read only when one of the Runs names a
    host; empty for one host (SQLite, whose Runs store none: any later Run counts there)."""
    from qlshadow.storage.models import Host
    if not any(r.get("host") for r in runs):
        return {}
    ids = {name: i for i, name in Host.select(Host.id, Host.name).tuples()}
    return ids if len(ids) > 1 else {}


def run_conditions(runs: list, now: int, shadow: bool = True, daemon: str | None = None,
                   limits: dict | None = None) -> dict:
    """{run id: (condition, since)} of the open ones among Runs as the reader gives them
    (every Run is one crond started), by condition(): a Run's finish is lost once a later
    Run of its cron started on its own host."""
    open_runs = [r for r in runs if r["finished_at"] is None]
    if not open_runs:
        return {}
    overlapping = overlaps(daemon)
    ids = {} if overlapping else host_ids(open_runs)
    later = {} if overlapping else {r["id"]: later_run(r["cron_id"], r["accepted_at"],
                                                       ids.get(r.get("host")), len(ids))
                                    for r in open_runs}
    if limits is None:  # a lost finish needs no limit: read only those of the others
        limits = stuck_limits([r["cron_id"] for r in open_runs if later.get(r["id"]) is None],
                              now, shadow)
    return {r["id"]: condition(r["accepted_at"], limits.get(r["cron_id"], STUCK_DEFAULT), now,
                               later.get(r["id"]), overlapping)
            for r in open_runs}


def with_conditions(runs: list, now: int, shadow: bool = True, daemon: str | None = None,
                    found: dict | None = None) -> list:
    """The Runs, each with its "condition": CONDITIONS' word when open, else "exited"
    ("finish_lost" for a Run a reboot closed). found: run_conditions' answer, if read."""
    from qlshadow.core.shadow import LOST_AT_REBOOT_WORDS
    if found is None:
        found = run_conditions(runs, now, shadow, daemon)
    for r in runs:
        if r["id"] in found:
            r["condition"] = found[r["id"]][0]
        else:  # a Run a reboot closed never told its finish either
            r["condition"] = ("finish_lost" if r.get("outcome") == LOST_AT_REBOOT_WORDS
                              else "exited")
    return runs
