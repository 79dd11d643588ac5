"""What the gate asks health about open Runs: each cron's stuck limit, the condition of its
open Runs, and the firings crond skipped while the line's previous run was open (no Flask).
"""
from __future__ import annotations

from qlshadow.storage.models import database
from qlshadow.watch.firing_times import _sql
from qlshadow.watch.health.conditions import CONDITIONS, OVERLAPPING, condition
from qlshadow.watch.health.facts import Execution
from qlshadow.watch.health.missed import skipped_by_crond
from qlshadow.watch.health.runs import later_run, stuck_limits

# A cron's open Runs of the window, and its Runs around missed firings (whether the line's
# previous run was still open then), through shadow_runs_cron; read only for crons that
# have them.
_OPEN_RUNS = ('SELECT "accepted_at" FROM "shadow_runs" WHERE "cron_id" = ? '
              'AND "accepted_at" >= ? AND "accepted_at" < ? AND "finished_at" IS NULL '
              'ORDER BY "accepted_at"')
# The same with each Run's host, for a fleet of several hosts: every row of the window is
# looked up, as the window's counts (reads.run_stats) already read each one.
_OPEN_HOST_RUNS = ('SELECT "accepted_at", "host_id" FROM "shadow_runs" WHERE "cron_id" = ? '
                   'AND "accepted_at" >= ? AND "accepted_at" < ? AND "finished_at" IS NULL '
                   'ORDER BY "accepted_at", "id"')
# A cron's newest Run, through shadow_runs_cron.
_NEWEST_RUN = ('SELECT "accepted_at", "finished_at" FROM "shadow_runs" WHERE "cron_id" = ? '
               'ORDER BY "accepted_at" DESC, "id" DESC LIMIT 1')
# The last Run before a firing: one seek of shadow_runs_cron, then its row.
_RUN_BEFORE = ('SELECT "accepted_at", "finished_at" FROM "shadow_runs" WHERE "cron_id" = ? '
               'AND "accepted_at" < ? ORDER BY "accepted_at" DESC, "id" DESC LIMIT 1')


class Judge:
    """What the gate asks health about open Runs: each cron's stuck limit (stuck_after,
    else health's own), the condition of an open Run, and crond's overlap skips."""

    def __init__(self, now: int, stuck_after: int | None, daemon: str | None):
        self.now, self.stuck_after = now, stuck_after
        self.overlapping = daemon == OVERLAPPING
        self._limits: dict = {}
        self._hosts: int | None = None  # hosts the fleet recorded, once read

    def prefetch(self, ids: list) -> None:
        """Read the stuck limits of these crons at once (those with open Runs)."""
        if self.stuck_after is None and ids:
            self._limits.update(stuck_limits(ids, self.now))

    def limit(self, cron_id: int) -> int:
        if self.stuck_after is not None:
            return self.stuck_after
        if cron_id not in self._limits:
            self._limits.update(stuck_limits([cron_id], self.now))
        return self._limits[cron_id]

    def open_runs(self, cron_id: int, since: int, until: int, count: int) -> dict:
        """{condition: count} of the cron's `count` Runs of the window that have no finish."""
        counts = dict.fromkeys(CONDITIONS, 0)
        if not self.overlapping and self.fleet() > 1:
            return self._open_runs_per_host(cron_id, since, until, counts)
        if not self.overlapping:
            # Every open Run but the cron's newest has a later one: its finish was lost.
            # So only the newest is read (one seek), never the window's Runs.
            row = database.obj.execute_sql(_sql(_NEWEST_RUN), (cron_id,)).fetchone()
            if row is not None and row[1] is None and since <= row[0] < until:
                counts[condition(row[0], self.limit(cron_id), self.now)[0]] += 1
                count -= 1
            counts["finish_lost"] += count
            return counts
        # A daemon that starts overlapping runs: each open Run by its age alone.
        for (at,) in database.obj.execute_sql(_sql(_OPEN_RUNS), (cron_id, since, until)):
            counts[condition(at, self.limit(cron_id), self.now, None, True)[0]] += 1
        return counts

    def fleet(self) -> int:
        """How many hosts share the database (one on SQLite, whose Runs store no host)."""
        if self._hosts is None:
            from qlshadow.storage.db import is_sqlite
            from qlshadow.storage.models import Host
            self._hosts = 1 if is_sqlite() else Host.select().count()
        return self._hosts

    def _open_runs_per_host(self, cron_id: int, since: int, until: int, counts: dict) -> dict:
        """open_runs on a fleet: crond starts a line again only on its own host, so only a
        later Run of the same host proves an open Run's finish lost (a Run stored with no
        host, from before the fleet: any later Run)."""
        newest: dict = {}  # host id: its newest open Run of the window
        for at, host in database.obj.execute_sql(_sql(_OPEN_HOST_RUNS),
                                                 (cron_id, since, until)):
            if host in newest:  # a later open Run of the same host started
                counts["finish_lost"] += 1
            newest[host] = at
        for host, at in newest.items():
            if later_run(cron_id, at, host, self.fleet()) is not None:
                counts["finish_lost"] += 1
            else:
                counts[condition(at, self.limit(cron_id), self.now)[0]] += 1
        return counts

    def skipped(self, cron_id: int, missed: list) -> set:
        """The missed firings crond skipped because the line's previous run was open."""
        if self.overlapping or not missed:
            return set()
        # Only the line's last run before a firing can hold it back (crond starts a line
        # only after its run ended).
        found = set()
        for at in missed:
            row = database.obj.execute_sql(_sql(_RUN_BEFORE), (cron_id, at)).fetchone()
            if row is not None and skipped_by_crond(
                    at, [Execution(row[0], row[1], None, row[1] is None, True)],
                    self.limit(cron_id) if row[1] is None else 0):
                found.add(at)
        return found
