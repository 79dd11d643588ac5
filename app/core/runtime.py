"""The runtime of one app: everything that changes while the service runs.

Settings are read once and never change (app.extensions["qlshadow"]); what lives between
requests is here instead of in module globals: the token cache, the counters, whether
writes work, and retention's cursors. create_app makes one, so two apps in one process
(the tests make many) share nothing and nothing needs resetting.

Also the service's clock watch (watch_clock): the one thread of its own, which looks at the
clocks once a minute and records a step of the wall clock (NTP's first sync on a router
whose clock started from a file's time at boot), so that the gate and health judge the
firings crond skipped or repeated across it as `clock step`, not missed.
"""
from __future__ import annotations

import logging
import math
import threading
import time

from qlshadow.storage import db, retention
from qlshadow.core.auth import TokenCache
from qlshadow.core.counters import Counters, Uncounted

log = logging.getLogger("qlshadow")

KEY = "qlshadow.core.runtime"  # where create_app keeps it: app.extensions[KEY]


class Runtime:
    """The mutable state of one app; each part is safe to use from every request thread."""
    __slots__ = ("tokens", "counters", "writes", "pruner", "database", "host_id")

    def __init__(self, settings):
        self.tokens = TokenCache()
        self.counters = Counters() if settings.count_metrics else Uncounted()
        self.writes = db.WriteHealth()
        self.pruner = retention.Pruner(retention.policy_of(settings))
        self.database = None  # the app's own database, set by create_app once opened
        self.host_id = None  # hosts.id that Runs and instances carry; None on SQLite (fleet.py)


# --- clock steps ----------------------------------------------------------------------------

WATCH_INTERVAL = 60  # seconds between looks: also the most a step's window is wider than it
# Smaller differences between the clocks are not steps: NTP slews both alike, and the two
# reads of one look are microseconds apart. BusyBox crond makes up a forward step of up to
# an hour by starting the minutes it jumped over at once (late), and runs none across a
# longer one; either way those firings have no Run in their minute.
STEP_MIN = 5
STEPS_KEPT = 100  # clock_steps rows: a few per boot at most


def clocks() -> tuple:
    """(wall-clock seconds, seconds since boot): the boot clock is never set, only slewed."""
    return time.time(), time.clock_gettime(time.CLOCK_BOOTTIME)


class ClockWatch:
    """Finds steps of the wall clock between two looks: wall time that passed otherwise than
    the boot clock did."""

    def __init__(self, clock=clocks):
        self._clock = clock
        self._last = clock()
        self._unrecorded: list = []  # steps whose write failed: written at the next check

    def look(self) -> tuple | None:
        """(step, lo, hi) when the wall clock stepped since the last look, else None.

        [lo, hi) holds every wall time crond skipped (forward) or saw twice (backward): the
        step happened somewhere between the two looks, so the window is that much wider.
        """
        wall, boot = self._clock()
        last_wall, last_boot = self._last
        self._last = (wall, boot)
        step = (wall - last_wall) - (boot - last_boot)
        if abs(step) < STEP_MIN:
            return None
        lo, hi = (last_wall, wall) if step > 0 else (last_wall + step, wall - step)
        return round(step), math.floor(lo), math.ceil(hi)

    def check(self) -> tuple | None:
        """look(), and record a step found (clock_steps), with any an earlier check failed
        to record (a full disk, say): the next look could never see them again."""
        found = self.look()
        if found is not None:
            self._unrecorded.append((*found, int(self._last[0])))
        while self._unrecorded:
            step, lo, hi, at = self._unrecorded[0]
            record_step(step, lo, hi, at)
            del self._unrecorded[0]
        return found


def record_step(step: int, lo: int, hi: int, at: int) -> None:
    """Keep one clock step for the gate and health; the oldest beyond STEPS_KEPT go."""
    from qlshadow.storage.models import ClockStep
    from qlshadow.timefmt import local_text
    with db.connected(), db.write_transaction():
        new = ClockStep.insert(at=at, step=step, lo=lo, hi=hi).execute()
        ClockStep.delete().where(ClockStep.id <= new - STEPS_KEPT).execute()
    log.warning("the wall clock stepped %+d s (seen at %s): firings between %s and %s are "
                "judged `clock step`, not missed", step, local_text(at), local_text(lo),
                local_text(hi))


def watch_clock(interval: float = WATCH_INTERVAL, clock=clocks,
                stop: threading.Event | None = None) -> threading.Thread:
    """Start the clock watch: a daemon thread that looks every interval (a wait on the
    monotonic clock, which no step moves) until stop is set."""
    watch = ClockWatch(clock)
    stop = stop or threading.Event()

    def run() -> None:
        while not stop.wait(interval):
            try:
                watch.check()
            except Exception as exc:  # noqa: BLE001 - the database's or a bug: looked at again next time
                log.warning("cannot record a clock step: %s", str(exc).strip().splitlines()[0]
                            if str(exc).strip() else type(exc).__name__)

    thread = threading.Thread(target=run, name="qlshadow-clock", daemon=True)
    thread.start()
    return thread
