"""The health of every cron, read: read_all, the entry point of the API, `qlshadow status`,
/metrics, the page and the notify tick (no Flask).
"""
from __future__ import annotations

import time

from qlshadow.storage.models import Cron, database
from qlshadow.watch.health.cache import WINDOWS, Schedules
from qlshadow.watch.health.facts import NO_FIRINGS
from qlshadow.watch.health.missed import missed_firings
from qlshadow.watch.health.reads import (host_reads, judge_per_host, older_successes,
                                         recent_executions)
from qlshadow.watch.health.state import evaluate, order

MAX_CRONS = 1000  # one read answers at most this many crons, lowest ids first
_MINUTE = 60
_DAY = 86400


def read_all(now: int | None = None, shadow: bool = True, cron_id: int | None = None,
             count_missed: bool = False, daemon: str | None = None) -> list:
    """The health of every cron (or one), problems first (state.order); read-only.

    count_missed adds "missed_recent" to each: the missed firings since the oldest of its
    recent executions (or since it was created or last changed), at most a month back.
    daemon: the cron daemon's kind (state.evaluate).
    """
    from qlshadow.watch.firing_times import clock_steps, is_active
    now = int(time.time()) if now is None else now
    with database.atomic():  # one snapshot; a read takes no write lock
        query = Cron.select().order_by(Cron.id).limit(MAX_CRONS)
        if cron_id is not None:
            query = query.where(Cron.id == cron_id)
        crons = list(query.dicts())
        ids = [c["id"] for c in crons]
        per_host = judge_per_host(crons, now)
        recent = recent_executions(ids, shadow, host_reads(crons, per_host))
        lacking = [i for i in ids if recent[i]
                   and not any(not e.open and e.exit_code == 0 for e in recent[i])]
        older = older_successes(lacking)
        steps = clock_steps(now - WINDOWS[2], now + 1)  # a few rows, read whole
    schedules = Schedules(now)
    healths = []
    for cron in crons:
        active = is_active(cron)
        firings = schedules.around(cron["schedule"]) if active else NO_FIRINGS
        hosts = per_host.get(cron["id"])
        found = evaluate(cron, recent[cron["id"]], firings, now, older.get(cron["id"]), steps,
                         daemon, hosts=hosts)
        if count_missed:
            found["missed_recent"] = _missed_recent(cron, recent[cron["id"]], found["grace"],
                                                    schedules, now, steps, daemon,
                                                    hosts) if active else 0
        healths.append(found)
    return order(healths)


def _missed_recent(cron: dict, executions: list, grace: int, schedules: Schedules,
                   now: int, steps: list = (), daemon: str | None = None,
                   hosts: dict | None = None, seen: int | None = None) -> int:
    if hosts is not None:  # each host's misses over its own executions, added up
        return sum(_missed_recent({**cron, "created_at": max(cron["created_at"], first)},
                                  [e for e in executions if e.host == host_id], grace,
                                  schedules, now, steps, daemon, seen=last)
                   for host_id, (_name, first, last) in hosts.items())
    judged_from = max(cron["created_at"], cron["updated_at"]) + 1
    lo = min((e.start for e in executions), default=judged_from)
    lo = max(lo, judged_from, now - 31 * _DAY)
    until = now - max(grace, _MINUTE) + 1
    if seen is not None:  # a host's firings after it was last seen are its silence
        until = min(until, seen + 1)
    expected = schedules.between(cron["schedule"], lo, until)
    fires = set(schedules.between(cron["schedule"], lo, now + 1))
    return missed_firings(cron, executions, expected, grace, now, steps, fires.__contains__,
                          daemon, cron.get("max_runtime"))
