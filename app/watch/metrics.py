"""Metrics in the Prometheus text format, written by hand (no Flask).

prometheus_client would add about 0.8 MiB of RSS to a 40 MiB process and is not packaged
for OpenWrt; the format is a few lines. The callback path only adds 1 to a plain integer
in a dict under one uncontended lock (Counters); everything else is read when /metrics is scraped.
"""
from __future__ import annotations

import os
import time

from qlshadow.core.counters import Counters
from qlshadow.core.shadow import RUN_STATES

# Per-cron series are bounded like any page of the API.
MAX_CRON_SERIES = 1000

def _escape(value) -> str:
    # Label values escape backslash, double quote and newline; nothing else.
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value) -> str:
    if isinstance(value, float) and not value.is_integer():
        return repr(value)
    return str(int(value))


class _Text:
    """Collects families: one HELP and TYPE line each, then its samples."""

    def __init__(self):
        self.lines: list = []

    def family(self, name: str, kind: str, help_text: str, samples) -> None:
        # Text format 0.0.4 names a counter by its sample name, "_total" included.
        sample = name + "_total" if kind == "counter" else name
        self.lines.append(f"# HELP {sample} {help_text}")
        self.lines.append(f"# TYPE {sample} {kind}")
        for labels, value in samples:
            if labels:
                inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
                self.lines.append(f"{sample}{{{inner}}} {_number(value)}")
            else:
                self.lines.append(f"{sample} {_number(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def process_rss_bytes() -> int | None:
    """This process's resident set size from /proc, or None where there is no /proc."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def storage_bytes() -> dict:
    """{"database": bytes, "wal": bytes} for SQLite files; database size only on PostgreSQL."""
    from qlshadow.storage.db import is_sqlite
    from qlshadow.storage.models import database
    db = database.obj
    if is_sqlite(db):
        sizes = {}
        for key, suffix in (("database", ""), ("wal", "-wal")):
            try:
                sizes[key] = os.path.getsize(db.database + suffix)
            except OSError:
                sizes[key] = 0  # no WAL file between checkpoints is normal
        return sizes
    row = db.execute_sql("SELECT pg_database_size(current_database())").fetchone()
    return {"database": int(row[0])}


def runs_by_state() -> dict:
    """Shadow Runs counted by state (every known state, zero when absent)."""
    from peewee import fn

    from qlshadow.storage.models import ShadowRun
    from qlshadow.core.shadow import run_state
    counts = dict.fromkeys(RUN_STATES, 0)
    # A Run is running until it has finished_at, then exited (shadow.run_state).
    for finished, number in (ShadowRun.select(ShadowRun.finished_at.is_null(False), fn.COUNT(1))
                             .group_by(ShadowRun.finished_at.is_null(False)).tuples()):
        counts[run_state(1 if finished else None)] = number
    return counts


def last_finishes(limit: int = MAX_CRON_SERIES) -> list:
    """(cron_id, name, exit_code, finished_at) of each cron's latest finished Legacy instance."""
    from peewee import fn

    from qlshadow.storage.models import Cron, RunningInstance
    latest = (RunningInstance.select(RunningInstance.cron.alias("cron_id"),
                                     fn.MAX(RunningInstance.id).alias("last_id"))
              .where(RunningInstance.finished_at.is_null(False))
              .group_by(RunningInstance.cron).alias("latest"))
    query = (RunningInstance
             .select(Cron.id, Cron.name, RunningInstance.exit_code, RunningInstance.finished_at)
             .join(latest, on=(RunningInstance.id == latest.c.last_id))
             .switch(RunningInstance).join(Cron, on=(RunningInstance.cron == Cron.id))
             .order_by(Cron.id).limit(limit))
    return list(query.tuples())


def cron_failures(limit: int = MAX_CRON_SERIES) -> dict:
    """{cron_id: failed executions stored}: Legacy instances that exited non-zero."""
    from peewee import fn

    from qlshadow.storage.models import RunningInstance
    query = (RunningInstance.select(RunningInstance.cron, fn.COUNT(RunningInstance.id))
             .where(RunningInstance.exit_code != 0).group_by(RunningInstance.cron).limit(limit))
    return dict(query.tuples())


def _cron_families(out: _Text, healths: list, failures: dict) -> None:
    """Per-cron series, one for every cron (those that never ran included)."""
    from qlshadow.watch.health import STATES
    labelled = [({"cron_id": h["cron_id"], "name": h["name"]}, h) for h in healths]
    out.family("qlshadow_cron_state", "gauge",
               "1 for the cron's health state (docs/CONTRACT.md 12), 0 for the others.",
               [({**labels, "state": state}, int(h["state"] == state))
                for labels, h in labelled for state in STATES])
    for name, key, help_text in (
            ("qlshadow_cron_last_success_timestamp_seconds", "last_success",
             "When the cron's latest successful execution finished (Unix time; 0: never)."),
            ("qlshadow_cron_last_start_timestamp_seconds", "last_start",
             "When the cron's latest execution started (Unix time; 0: never)."),
            ("qlshadow_cron_next_expected_timestamp_seconds", "next_expected",
             "The cron's next firing (Unix time; 0: none expected)."),
            ("qlshadow_cron_running_since_timestamp_seconds", "running_since",
             "When the cron's open execution started (Unix time; 0: not running)."),
            ("qlshadow_cron_grace_seconds", "grace",
             "Seconds a due firing may go without a record before it counts as missed.")):
        out.family(name, "gauge", help_text, [(labels, h[key] or 0) for labels, h in labelled])
    from qlshadow.watch.health import CONDITIONS
    out.family("qlshadow_cron_open_executions", "gauge",
               "The cron's open executions among its 20 newest, by condition: running within "
               "its time, stuck past it, finish_lost once a later one started.",
               [({**labels, "condition": word}, h["open"][word])
                for labels, h in labelled for word in CONDITIONS])
    out.family("qlshadow_cron_failures", "counter",
               "Failed executions (non-zero exit) among those stored (within retention).",
               [(labels, failures.get(h["cron_id"], 0)) for labels, h in labelled])
    out.family("qlshadow_cron_missed", "counter",
               "Missed firings since the oldest of the cron's 20 newest executions "
               "(at most a month back).",
               [(labels, h["missed_recent"]) for labels, h in labelled])


NOTIFICATION_OUTCOMES = ("sent", "pending", "given_up")


def _channel_names(settings) -> list:
    """The configured notification channels: each has its series from 0, so increase()
    sees its first delivery (docs/ALERTS.md)."""
    from qlshadow.watch import notify
    try:
        values = notify.load_settings(config_file=settings.config_file)
        return [channel.name for channel in notify.configured_channels(values)]
    except (ValueError, OSError):  # a bad conf value: the notify command names it
        return []


def _delay_histogram(out: _Text, buckets: list, count: int, total: int) -> None:
    from qlshadow.watch.alerts import DELAY_BUCKETS
    name = "qlshadow_notification_delay_seconds"
    out.lines += [f"# HELP {name} Seconds from each stored alert event to the pass (the "
                  "service's sender or a notify tick) that sent its delivery.",
                  f"# TYPE {name} histogram"]
    out.lines += [f'{name}_bucket{{le="{bound}"}} {n}' for bound, n in zip(DELAY_BUCKETS, buckets,
                                                                          strict=True)]
    out.lines += [f'{name}_bucket{{le="+Inf"}} {count}', f"{name}_sum {total}",
                  f"{name}_count {count}"]


def _host_families(out: _Text, settings) -> None:
    """Free bytes where the data lives, and (system mode) whether the crontab is installed."""
    from qlshadow.storage.db import free_bytes
    free = free_bytes(settings.data_dir)
    if free is not None:
        out.family("qlshadow_data_free_bytes", "gauge",
                   "Bytes free to this service on the partition that holds QL_DATA_DIR.",
                   [({}, free)])
    if settings.scheduler == "system":
        from qlshadow.host.crontab import install_state
        from qlshadow.host.crond import crond_running
        out.family("qlshadow_crontab_installed", "gauge",
                   "1 when the last crontab sync installed the crontab, else 0.",
                   [({}, int(install_state(settings) == "installed"))])
        # An installed crontab starts nothing without a daemon: /health says so in words.
        out.family("qlshadow_crond_running", "gauge",
                   "1 when a cron daemon runs on this host, else 0.",
                   [({}, int(crond_running()))])


def render(counters: Counters, settings=None, policy=None) -> str:
    """The whole exposition: in-process counters plus a few cheap reads of the database.

    With settings: the per-cron health series, free bytes and the crontab's install state.
    policy: the retention.Policy whose storage budget is shown (none: no budget gauges).
    """
    from qlshadow import __version__
    counts = counters.snapshot()
    out = _Text()
    build = {"version": __version__}
    if settings is not None:
        build["host"] = settings.host_name  # QL_HOST_NAME: which host of a fleet answers
    out.family("qlshadow_build_info", "gauge", "Version of the running qlshadow.",
               [(build, 1)])
    out.family("qlshadow_callbacks", "counter",
               "Status callbacks answered since start, by result.",
               [({"result": k}, v) for k, v in sorted(counts["callbacks"].items())])
    out.family("qlshadow_shadow_outcomes", "counter",
               "Shadow writer outcomes since start (created, advanced, replayed or a failure reason).",
               [({"outcome": k}, v) for k, v in sorted(counts["shadow"].items())])
    out.family("qlshadow_write_errors", "counter",
               "Requests whose database work failed and was rolled back, since start.",
               [({}, counts["write_errors"])])
    from peewee import DatabaseError, InterfaceError
    healths = failures = notifications = delays = hosts = None
    try:
        sizes, runs, finishes = storage_bytes(), runs_by_state(), last_finishes()
        if settings is not None:
            from qlshadow.watch import health
            from qlshadow.host.crond import kind_for
            healths = health.read_all(int(time.time()),
                                      shadow="scheduled_system" in settings.shadow_origins,
                                      count_missed=True, daemon=kind_for(settings))
            failures = cron_failures()
            from qlshadow.watch import alerts
            notifications, delays = alerts.counts_by_channel(), alerts.delays()
            from qlshadow.core.fleet import hosts_listing
            from qlshadow.storage.db import is_sqlite
            hosts = hosts_listing(one_host=is_sqlite())
    except (DatabaseError, InterfaceError):
        # The counters matter most while the database fails: answer them without its part.
        from qlshadow.storage.db import discard_connection
        discard_connection()
        sizes = runs = finishes = healths = notifications = delays = hosts = None
    out.family("qlshadow_database_up", "gauge",
               "1 when the database answered this scrape's reads, else 0.",
               [({}, 0 if sizes is None else 1)])
    if sizes is not None:
        out.family("qlshadow_database_bytes", "gauge", "Size of the database in bytes.",
                   [({}, sizes["database"])])
        if "wal" in sizes:
            out.family("qlshadow_database_wal_bytes", "gauge",
                       "Size of the SQLite write-ahead log in bytes.", [({}, sizes["wal"])])
        if policy is not None and policy.db_path:
            from qlshadow.storage.retention import storage_use
            use = storage_use(policy)
            out.family("qlshadow_storage_used_bytes", "gauge",
                       "Bytes counted against the storage budget: database pages in use, "
                       "WAL and task logs.", [({}, use["used_bytes"])])
            out.family("qlshadow_storage_budget_bytes", "gauge",
                       "QL_STORAGE_BUDGET in bytes (0: no budget).",
                       [({}, use["budget_bytes"])])
        out.family("qlshadow_runs", "gauge", "Shadow Runs stored, by state.",
                   [({"state": k}, v) for k, v in runs.items()])
        out.family("qlshadow_cron_last_exit_code", "gauge",
                   "Exit code of each cron's latest finished execution.",
                   [({"cron_id": c, "name": n}, code) for c, n, code, _ in finishes
                    if code is not None])
        out.family("qlshadow_cron_last_finish_timestamp_seconds", "gauge",
                   "When each cron's latest execution finished (Unix time).",
                   [({"cron_id": c, "name": n}, at) for c, n, _, at in finishes])
    if healths is not None:
        _cron_families(out, sorted(healths, key=lambda h: h["cron_id"]), failures)
    if notifications is not None:
        counts = dict.fromkeys(((name, outcome) for name in _channel_names(settings)
                                for outcome in NOTIFICATION_OUTCOMES), 0)
        counts.update(notifications)
        out.family("qlshadow_notifications", "counter",
                   "Alert deliveries stored (within retention), by channel and outcome: sent, "
                   "pending (tried again by a later notify tick), given_up.",
                   [({"channel": channel, "outcome": outcome}, n)
                    for (channel, outcome), n in sorted(counts.items())])
    if delays is not None:
        _delay_histogram(out, *delays)
    if hosts is not None:
        out.family("qlshadow_fleet_host_last_seen_timestamp_seconds", "gauge",
                   "When each host sharing the database last started or ticked (Unix time).",
                   [({"host": h["name"]}, h["last_seen"]) for h in hosts])
        out.family("qlshadow_fleet_host_silent", "gauge",
                   "1 when the host's tick has not been seen for 3 minutes, else 0.",
                   [({"host": h["name"]}, int(h["state"] == "silent")) for h in hosts])
    if settings is not None:
        _host_families(out, settings)
    rss = process_rss_bytes()
    if rss is not None:
        out.family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
                   [({}, rss)])
    out.family("process_start_time_seconds", "gauge",
               "Start time of the process since the Unix epoch in seconds.", [({}, counters.started)])
    return out.text()
