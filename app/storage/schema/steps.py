"""The steps, in order (STEPS): step n brings a database of version n - 1 to version n.

To change the schema: change the models (they describe the latest version, what a fresh
database gets), then append one step to STEPS that makes the same change on a database of
the version before it. A table the first step creates comes from today's models, so a
step checks before it adds (schema/helpers.py skips what is already there). Steps 1 and
2 live in their own modules with the frozen tables and values they need; a step never
imports the live domain code (core/), whose later changes would change how an old
database upgrades.
"""
from __future__ import annotations

from peewee import Database

from qlshadow.storage.models import (AlertDelivery, AlertEvent, Claim, ClockStep, Cron, Host,
                                     HostBoot, RunningInstance, ServiceOutage, ShadowRun)
from qlshadow.storage.schema.helpers import add_column, add_indexes, add_table
from qlshadow.storage.schema.slim_runs import step_slim_runs


def _step_release_before_versions(db: Database) -> str | None:
    """Version 1 (rekey_runs.py): its frozen Run table is built only when the step runs,
    for a database from a release before versions, never on a usual start."""
    from qlshadow.storage.schema.rekey_runs import step_release_before_versions
    return step_release_before_versions(db)


def _step_cron_grace(db: Database) -> None:
    """Version 3: a cron's own grace period (watch/health/), null for the default."""
    add_column(db, Cron, "grace")


def _step_alerts(db: Database) -> None:
    """Version 4: the crons' last alerted state, the alert events and their deliveries."""
    add_column(db, Cron, "alert_state")
    add_table(db, AlertEvent)
    add_table(db, AlertDelivery)
    add_indexes(AlertEvent)
    add_indexes(AlertDelivery)


def _step_host_clock(db: Database) -> None:
    """Version 5: each host's boot (Runs open at a reboot are closed) and the clock steps."""
    add_table(db, HostBoot)
    add_table(db, ClockStep)


def _step_alert_tuning(db: Database) -> None:
    """Version 6: the crons' alert tuning (alert_after, max_runtime, quiet, snooze_until),
    all null: every existing cron keeps alerting as before."""
    for name in ("alert_after", "max_runtime", "quiet", "snooze_until"):
        add_column(db, Cron, name)


def _step_service_outage(db: Database) -> None:
    """Version 7: the service outages the tick found (watch/outage.py)."""
    add_table(db, ServiceOutage)


def _step_hosts(db: Database) -> str | None:
    """Version 8: the fleet: the hosts table, each cron's hosts and hosts mode, the claims of `one`
    crons, and the host of each Run and instance. Crons from before keep running where
    they ran, on every host that shares the database (["*"])."""
    add_table(db, Host)
    add_table(db, Claim)
    for name in ("hosts", "hosts_mode"):
        add_column(db, Cron, name)
    add_column(db, RunningInstance, "host_id")
    add_column(db, ShadowRun, "host_id")
    kept = db.execute_sql('UPDATE "crons" SET "hosts" = \'["*"]\' WHERE "hosts" IS NULL').rowcount
    if kept:
        return (f"{kept} cron(s) from before hosts were named run on every host sharing the "
                'database (hosts ["*"]), as they did')
    return None


# (what the step does, in words that follow "cannot" in an error; the step). Step n brings
# version n - 1 to version n and returns a line to log once it is committed, or None.
# Append only: never reorder or edit a step that has shipped. Step 1 builds tables from
# today's models, except shadow_runs, which it builds from the frozen RunV1: a later step
# that changes a table's columns must first give the earlier steps a frozen copy of it.
STEPS = (
    ("re-key shadow_runs by (accepted_at, id)", _step_release_before_versions),
    ("slim shadow_runs", step_slim_runs),
    ("add the crons' grace column", _step_cron_grace),
    ("add the alert tables", _step_alerts),
    ("add the host boot and clock step tables", _step_host_clock),
    ("add the crons' alert tuning columns", _step_alert_tuning),
    ("add the service outage record", _step_service_outage),
    ("add hosts and the crons' host fields", _step_hosts),
)
LATEST = len(STEPS)
