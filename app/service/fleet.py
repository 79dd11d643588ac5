"""A host's own part of the fleet tick: record that it is alive, and install its crontab
block again when a cron change made on another host altered it (core/fleet.py).

The `qlshadow notify` line of the block runs it every minute, so a host picks up a change
of the crons that name it within a minute. The check is the upsert the tick makes anyway
(it returns the host's block revisions): an idle tick costs one small write, on a shared
PostgreSQL database only; a SQLite database has one host, which installs its own changes.
"""
from __future__ import annotations

import logging

from qlshadow.core import fleet
from qlshadow.host import crontab

log = logging.getLogger("qlshadow")


def tick(settings) -> str | None:
    """Record this host as seen; in a fleet, install its block if it is behind. Returns what
    the install did, or None when nothing was installed."""
    from qlshadow.storage.db import connected, write_transaction
    with connected():
        with write_transaction():
            _, wanted, installed = fleet.record_host(settings.host_name)
        if wanted == installed or not joins(settings):
            return None  # a lone host installs its block with each of its own cron changes
        outcome = crontab.sync(settings)
        with write_transaction():
            # A change after the read above raised `wanted` again: the next tick installs.
            fleet.installed_block(settings.host_name, wanted)
    log.info("crontab block of host %s installed again after a cron change: %s",
                settings.host_name, outcome)
    return outcome


def joins(settings) -> bool:
    """True when this host shares its database (PostgreSQL) with other hosts: its first
    start installs its block even with no crons naming it yet, for the block's tick line
    is how it hears of a later change that names it (crontab.render_rows keeps it)."""
    from qlshadow.config import sqlite_file
    if sqlite_file(settings.db_url) is not None:
        return False
    from qlshadow.storage.db import connected
    from qlshadow.storage.models import Host
    with connected():
        return Host.select().limit(2).count() > 1
