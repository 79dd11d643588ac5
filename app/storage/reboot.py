"""Runs left open by a reboot: closed as lost at reboot by the first opening of a new boot.

A reboot kills every task crond started, so a Run still running then never gets its finish.
The kernel's boot id tells a reboot from a restart of the service: each host's last boot id
is one row (models.HostBoot), read once when a process opens the database for writing (the
service at start-up, a CLI command). When it differs, that process, in one transaction,
closes every open Run (finished_at now, never before its start; no exit code; marked
LOST_AT_REBOOT) with the Legacy instances and crons still running, and records the
new boot; a compare-and-set on the row makes two processes starting at once do it once.
On SQLite, which one host has by construction, that is every open Run. On PostgreSQL,
which several hosts may share (core/fleet.py), a reboot of one must not end the others'
Runs: only the Runs and instances that carry this host's id are closed, and only the
crons left with no open instance anywhere become idle. Rows from before the fleet carry no
host and are left as they are.
"""
from __future__ import annotations

import logging
import socket
import time

from qlshadow.storage.models import (CRON_IDLE, CRON_RUNNING, INSTANCE_RUNNING, INSTANCE_STOPPED,
                                     LOST_AT_REBOOT)

log = logging.getLogger("qlshadow")

BOOT_ID = "/proc/sys/kernel/random/boot_id"


def boot_id(path: str = BOOT_ID) -> str | None:
    """This boot's id, or None where the kernel has none to tell (not Linux)."""
    try:
        with open(path, encoding="utf-8") as fh:  # a UUID; utf-8 is loaded already
            return fh.read().strip() or None
    except (OSError, ValueError):
        return None


def note_boot(db, current: str | None = None, now: int | None = None,
              host: str | None = None) -> int:
    """Record this host's boot; in a new one, close the Runs left open. Returns how many.

    The usual start (the same boot) reads one row and writes nothing.
    """
    current = boot_id() if current is None else current
    if current is None:
        return 0
    host = socket.gethostname() if host is None else host
    q = db.param
    row = db.execute_sql(f'SELECT "boot_id" FROM "host_boots" WHERE "host" = {q}',
                         (host,)).fetchone()
    if row is not None and row[0] == current:
        return 0
    now = int(time.time()) if now is None else now
    from peewee import SqliteDatabase
    one_host = isinstance(db, SqliteDatabase)
    closed = 0
    # At start-up, before any request thread: a plain write transaction (BEGIN IMMEDIATE).
    with db.atomic("IMMEDIATE") if isinstance(db, SqliteDatabase) else db.atomic():
        if row is None:  # first seen: what was open before cannot be told from a reboot
            db.execute_sql(f'INSERT INTO "host_boots" ("host", "boot_id", "seen_at") '
                           f'VALUES ({q}, {q}, {q}) ON CONFLICT DO NOTHING', (host, current, now))
            return 0
        won = db.execute_sql(f'UPDATE "host_boots" SET "boot_id" = {q}, "seen_at" = {q} '
                             f'WHERE "host" = {q} AND "boot_id" = {q}',
                             (current, now, host, row[0])).rowcount
        mine, params = "", ()
        if won and not one_host:  # a shared database: this host's rows only
            host_id = db.execute_sql(f'SELECT "id" FROM "hosts" WHERE "name" = {q}',
                                     (host,)).fetchone()
            won = host_id is not None  # never seen in the fleet: it has no Runs to close
            mine, params = f' AND "host_id" = {q}', (host_id[0] if host_id else None,)
        if won:
            # A scan of the Run table, once per boot: no index holds the open Runs, and one
            # would be a page written by every callback.
            # Never before its start: a router's clock at boot may still be behind (it
            # starts from a file's time until NTP steps it).
            closed = db.execute_sql(f'UPDATE "shadow_runs" SET "finished_at" = CASE WHEN '
                                    f'"accepted_at" > {q} THEN "accepted_at" ELSE {q} END, '
                                    f'"created_running" = {q} WHERE "finished_at" IS NULL'
                                    + mine, (now, now, LOST_AT_REBOOT, *params)).rowcount
            # Their Legacy side as well, in 2.x's words: the instance stopped (status 2,
            # no exit code), the cron idle, as QingLong makes its running crons at its own
            # start. Else health would call each such cron running, then stuck.
            db.execute_sql(f'UPDATE "running_instances" SET "status" = {INSTANCE_STOPPED}, '
                           f'"finished_at" = CASE WHEN "started_at" > {q} THEN "started_at" '
                           f'ELSE {q} END WHERE "status" = {INSTANCE_RUNNING}' + mine,
                           (now, now, *params))
            still_open = ("" if one_host else
                          f' AND NOT EXISTS (SELECT 1 FROM "running_instances" AS "i" WHERE '
                          f'"i"."cron_id" = "crons"."id" AND "i"."status" = {INSTANCE_RUNNING})')
            db.execute_sql(f'UPDATE "crons" SET "status" = {CRON_IDLE} '
                           f'WHERE "status" = {CRON_RUNNING}' + still_open)
    if closed:
        log.warning("%d Run(s) left running by the boot before were closed as lost at reboot",
                    closed)
    return closed
