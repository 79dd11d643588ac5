"""The SQL that gathers health's facts: each cron's recent executions, and the hosts an
`each` cron is judged on (no Flask).

Every read is a few statements for all crons, each an index seek per cron that reads at
most RECENT rows (never a scan of the history).
"""
from __future__ import annotations

from qlshadow.storage.models import database
from qlshadow.watch.health.facts import Execution

RECENT = 20  # executions read per cron and per source (Legacy instances, Shadow Runs)

# One branch per cron, each an index seek that reads RECENT rows: running_instances_cron
# (cron_id, id), and shadow_runs_cron (cron_id, accepted_at, id), which alone answers the
# Runs' read (no lookup of the row). UNION ALL keeps it one statement on both databases
# (SQLite has no LATERAL).
_INSTANCES = ('SELECT * FROM (SELECT "cron_id", "pid", "started_at", "finished_at", "exit_code" '
              'FROM "running_instances" WHERE "cron_id" = {id} ORDER BY "id" DESC LIMIT {n}) '
              'AS "i{id}"')
_RUN_STARTS = ('SELECT * FROM (SELECT "cron_id", "accepted_at" FROM "shadow_runs" '
               'WHERE "cron_id" = {id} ORDER BY "accepted_at" DESC, "id" DESC LIMIT {n}) '
               'AS "r{id}"')
# The few Runs no instance stands for (their start callback was lost): read whole.
_RUN_ROWS = ('SELECT "cron_id", "accepted_at", "finished_at", "exit_code" '
             'FROM "shadow_runs" WHERE "cron_id" = {id} AND "accepted_at" = {at}')
# A cron with no success among its recent executions: its newest success, index-ordered.
_INSTANCE_SUCCESS = ('SELECT * FROM (SELECT "cron_id", "finished_at" FROM "running_instances" '
                     'WHERE "cron_id" = {id} AND "exit_code" = 0 AND "finished_at" IS NOT NULL '
                     'ORDER BY "id" DESC LIMIT 1) AS "s{id}"')
_CHUNK_MAX = 200  # branches per statement (SQLite allows 500 terms in a compound SELECT)
# The same reads with each row's host, for the crons judged per host (PostgreSQL only: an
# `each` cron naming several hosts), RECENT rows per host it names: the Runs' read then
# looks up each row (host_id is not in shadow_runs_cron), for those crons alone.
_HOST_INSTANCES = _INSTANCES.replace('"exit_code" ', '"exit_code", "host_id" ')
_HOST_RUN_STARTS = _RUN_STARTS.replace('"accepted_at" FROM', '"accepted_at", "host_id" FROM')
_HOST_RUN_ROWS = _RUN_ROWS.replace('"exit_code" ', '"exit_code", "host_id" ')


def _union(template: str, keys: list, n: int = RECENT, limits: dict | None = None):
    """Rows of template for each key (a cron id, or a (cron id, instant) pair); limits:
    {cron id: rows} where a cron reads other than n."""
    limits = limits or {}
    for lo in range(0, len(keys), _CHUNK_MAX):
        sql = " UNION ALL ".join(
            template.format(id=int(k), n=limits.get(k, n)) if not isinstance(k, tuple)
            else template.format(id=int(k[0]), at=int(k[1])) for k in keys[lo:lo + _CHUNK_MAX])
        yield from database.obj.execute_sql(sql)


def recent_executions(ids: list, shadow: bool, per_host: dict | None = None) -> dict:
    """{cron_id: [Execution]}: each cron's newest instances and Runs, merged where they are
    one execution (an instance that started in the very second its Run was accepted, on
    the same host: task.sh makes the execution id from that second).

    per_host: {cron_id: number of hosts} of the crons judged per host: their reads carry
    each row's host and take RECENT rows per host (judge_per_host); the others' are read
    as they always were, with no host."""
    if not per_host:
        return _recent(ids, shadow)
    out = _recent([i for i in ids if i not in per_host], shadow)
    out.update(_recent_per_host([i for i in ids if i in per_host], shadow, per_host))
    return out


def _recent(ids: list, shadow: bool) -> dict:
    instances: dict = {}
    for cron_id, pid, started, finished, code in _union(_INSTANCES, ids):
        instances.setdefault(cron_id, []).append((pid, started, finished, code))
    run_starts: dict = {}
    for cron_id, accepted in _union(_RUN_STARTS, ids):
        run_starts.setdefault(cron_id, []).append(accepted)
    out, lone = {}, []
    for cron_id in ids:
        mine, theirs = instances.get(cron_id, []), run_starts.get(cron_id, [])
        # Where a source holds more history than was read, the other's older rows would
        # find no partner: keep only the span both reads cover.
        cutoff = max(([mine[-1][1]] if len(mine) >= RECENT else [])
                     + ([theirs[-1]] if len(theirs) >= RECENT else []), default=None)
        scheduled = set(theirs)
        execs = [Execution(started, finished, code, finished is None,
                           True if started in scheduled else (False if shadow else None), pid)
                 for pid, started, finished, code in mine
                 if cutoff is None or started >= cutoff]
        seen = {e.start for e in execs}
        lone.extend((cron_id, at) for at in scheduled - seen if cutoff is None or at >= cutoff)
        out[cron_id] = execs
    for cron_id, accepted, finished, code in (_union(_RUN_ROWS, lone) if lone else ()):
        out[cron_id].append(Execution(accepted, finished, code, finished is None, True))
    return out


def _recent_per_host(ids: list, shadow: bool, per_host: dict) -> dict:
    """_recent with each row's host, RECENT rows per host: an instance and a Run are one
    execution when they started in the same second on the same host."""
    limits = {i: RECENT * max(per_host[i], 1) for i in ids}
    instances: dict = {}
    for cron_id, pid, started, finished, code, host in _union(_HOST_INSTANCES, ids,
                                                              limits=limits):
        instances.setdefault(cron_id, []).append((pid, started, finished, code, host))
    run_starts: dict = {}
    for cron_id, accepted, host in _union(_HOST_RUN_STARTS, ids, limits=limits):
        run_starts.setdefault(cron_id, []).append((accepted, host))
    out, lone = {}, set()
    for cron_id in ids:
        mine, theirs, read = instances.get(cron_id, []), run_starts.get(cron_id, []), limits[cron_id]
        cutoff = max(([mine[-1][1]] if len(mine) >= read else [])
                     + ([theirs[-1][0]] if len(theirs) >= read else []), default=None)
        scheduled = set(theirs)
        execs = [Execution(started, finished, code, finished is None,
                           True if (started, host) in scheduled else (False if shadow else None),
                           pid, host)
                 for pid, started, finished, code, host in mine
                 if cutoff is None or started >= cutoff]
        seen = {(e.start, e.host) for e in execs}
        lone.update((cron_id, at, host) for at, host in scheduled - seen
                    if cutoff is None or at >= cutoff)
        out[cron_id] = execs
    keys = sorted({(cron_id, at) for cron_id, at, _host in lone})
    for cron_id, accepted, finished, code, host in (_union(_HOST_RUN_ROWS, keys) if keys
                                                    else ()):
        if (cron_id, accepted, host) in lone:  # not another host's Run of that second
            out[cron_id].append(Execution(accepted, finished, code, finished is None, True,
                                          host=host))
    return out


def judge_per_host(crons: list, now: int) -> dict:
    """{cron_id: {host id: (name, first seen, last seen)}} of the crons judged per host: on
    a shared (PostgreSQL) database, each `each` cron naming more than one recorded host
    (["*"]: every recorded host). None of them on SQLite (one host): nothing is read.

    A silent host (its tick unseen for 3 minutes, core/fleet.py) is not judged: its own
    alert already says that it runs nothing (one alert for the outage, not one per cron and
    firing); the firings it missed count again once it is seen, until it runs a later one.
    Before it is silent, a firing after its last sighting is not judged either (state.py).
    A named host that never recorded itself runs nothing here and is not judged either."""
    from qlshadow.core import fleet
    from qlshadow.storage.db import is_sqlite
    if is_sqlite():
        return {}
    # The hosts are read only when an `each` cron names several, or every host.
    named = {c["id"]: fleet.cron_hosts(c.get("hosts")) for c in crons if fleet.mode(c) == "each"}
    wide = [c for c in crons if c["id"] in named
            and (fleet.ALL in named[c["id"]] or len(named[c["id"]]) > 1)]
    if not wide:
        return {}
    every = fleet.hosts_seen(now)
    if len(every) < 2:
        return {}
    by_name = {name: (i, first, last, silent)
               for i, (name, first, last, silent) in every.items()}
    out = {}
    for cron in wide:
        names = named[cron["id"]]
        recorded = list(by_name) if fleet.ALL in names else [n for n in names if n in by_name]
        if len(recorded) < 2:
            continue
        out[cron["id"]] = {by_name[n][0]: (n, by_name[n][1], by_name[n][2]) for n in recorded
                           if not by_name[n][3]}
    return out


def host_reads(crons: list, per_host: dict) -> dict:
    """{cron_id: hosts} of the crons whose executions are read with their host, RECENT rows
    per host (recent_executions): those judged per host, and on a fleet (several recorded
    hosts) each `one` cron, RECENT rows in all (one run per firing), whose open runs end
    only by a later run of their own host (conditions.open_conditions)."""
    from qlshadow.core import fleet
    from qlshadow.storage.db import is_sqlite
    from qlshadow.storage.models import Host
    reads = {i: len(hosts) for i, hosts in per_host.items()}
    ones = [c["id"] for c in crons if fleet.mode(c) == "one"]
    if ones and not is_sqlite() and Host.select().count() > 1:
        reads.update(dict.fromkeys(ones, 1))
    return reads


def older_successes(ids: list) -> dict:
    """{cron_id: finished_at} of the newest successful Legacy instance of each cron."""
    return {cron_id: at for cron_id, at in _union(_INSTANCE_SUCCESS, ids)} if ids else {}
