"""The tick inside the running service: what the crontab's tick line asks for over HTTP
(`POST /open/notify/tick`, shell/tick.sh), so that no Python starts for it every minute.

The request is answered at once; the tick (alerts.tick, with the service answering, which
closes an open outage) runs in the service's sender thread (sender.py: one thread sends,
and ticks asked for while it is busy make one more pass), or, in an app without a sender,
in a thread of its own, one at a time: a request that comes while one runs starts nothing.
The channels are read as the fallback tick reads them
(notify.conf in the data dir, QL_NOTIFY_FILE again at each tick, the environment over
both), so both ticks send through the same channels.
"""
from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger("qlshadow.tick")


class Ticker:
    """One app's tick thread: at most one at a time."""

    def __init__(self):
        self.busy = threading.Lock()
        self.thread: threading.Thread | None = None


def run_in_background(ticker: Ticker, settings, database) -> bool:
    """Start one tick in a thread over database; False (nothing started) while one runs."""
    if not ticker.busy.acquire(blocking=False):
        return False
    try:
        ticker.thread = threading.Thread(target=_run, args=(ticker, settings, database),
                                         name="qlshadow-tick", daemon=True)
        ticker.thread.start()
    except BaseException:
        ticker.busy.release()
        raise
    return True


def channels_for(settings) -> list:
    """The channels the tick sends through: notify.conf's, as `qlshadow notify` reads them."""
    from qlshadow.files import make_private
    from qlshadow.host.crontab import NOTIFY_CONF, real_data_dir
    from qlshadow.watch import notify
    conf = os.path.join(real_data_dir(settings), NOTIFY_CONF)
    make_private(conf)  # the channels' credentials: 0600, whoever loosened it since the start
    sources = notify.load_sources(config_file=conf if os.path.isfile(conf) else None)
    return notify.configured_channels(sources.values, sources.origin)


def tick_once(settings, database) -> None:
    """One tick over database (bound to this thread by the caller), the service answering."""
    from qlshadow.config import sqlite_file
    from qlshadow.watch.alerts import tick
    try:
        with database.connection_context():
            if sqlite_file(settings.db_url) is None:
                _fleet_tick(settings)
            tick(settings, channels_for(settings), answered=True)
    except Exception:  # a thread's error reaches nobody else: the service's log says it
        log.exception("the tick failed")


def _fleet_tick(settings) -> None:
    """A host of a fleet on PostgreSQL: seen now, its crontab block brought up to date."""
    from qlshadow.host.crontab import CrontabError
    from qlshadow.service import fleet
    try:
        fleet.tick(settings)
    except CrontabError as exc:
        log.warning("crontab block not installed again: %s", exc)


def _run(ticker: Ticker, settings, database) -> None:
    from qlshadow.storage.models import database as models
    before = models.bind_thread(database)
    try:
        tick_once(settings, database)
    finally:
        models.bind_thread(before)
        ticker.busy.release()
