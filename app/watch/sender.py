"""The in-service alert sender: a failure (or a recovery) is sent within seconds of its
finish callback instead of at the next minute's `notify` tick.

When a finish callback recorded an alert event, its web adapter (web/views/callback.py)
calls `wake()` once the answer is done with: after the response was written, and on the
loop lane after the batch's fsync made the callback durable (`hold_thread` and
`release`). Nothing of it runs on the callback's path or in its transaction.

`wake()` puts a wake-up in a small queue and starts the one sender thread if none runs.
The thread takes every queued wake-up at once, queues and sends what is due through
alerts.queue_events and alerts.deliver (the tick's own claims: each delivery is sent once
across this service, the ticks, and other servers on the same PostgreSQL database), and
ends when no wake-up came meanwhile. So an idle service has no sender thread and holds
nothing for it. A send waits at most its channel's timeout; a failed one is retried by
the tick, which stays the clock for retries and for what did not happen (missed, stuck).
A wake-up beyond QUEUE_MAX while the thread is busy drops the oldest one, counted and
logged: dropping loses nothing, as the thread's next pass (or the tick) finds every due
delivery in the database. A service killed while sending leaves its claim to lapse; the
next tick after the lease sends it (alerts.CLAIM_MARGIN).

Any part of the service can wake it: `wake(app)` (a no-op for an app without a sender,
such as the test client's), or `of(app).wake(reason)`. The tick line's request
(service_tick.py) wakes it with TICK: that pass runs the whole minute's tick, so the
service sends from one thread at a time.
"""
from __future__ import annotations

import collections
import logging
import threading
import time

log = logging.getLogger("qlshadow")

KEY = "qlshadow.watch.sender"  # where install() keeps it: app.extensions[KEY]
QUEUE_MAX = 16  # wake-ups waiting while a pass runs; more drop the oldest
TICK = "tick"  # the reason of the tick line's wake-up: that pass runs the whole tick
# With no channel configured, a pass finds nothing to send: wake-ups other than the tick's
# are ignored for this long after it (no thread, no reading of the settings per callback);
# a channel set meanwhile in QL_NOTIFY_FILE is found by the first pass after it.
NO_CHANNEL_RECHECK = 30.0


class Sender:
    """One app's sender: at most one thread, started by wake(), gone when idle."""

    def __init__(self, settings, database, channels=None, send=None):
        self.settings = settings
        self.database = database  # the app's own database, bound in the sender's thread
        # channels: a function returning the channels (default: read from the settings at
        # each pass, as the tick reads notify.conf each minute); send: notify.send.
        self._channels = channels
        self._send = send
        self._lock = threading.Lock()
        self._wakes: collections.deque = collections.deque(maxlen=QUEUE_MAX)
        self._thread: threading.Thread | None = None
        self.dropped = 0  # wake-ups dropped since start
        self._unlogged = 0
        # Wake-ups made on this thread wait for release(): the loop lane's thread, whose
        # callbacks are durable only once the batch's fsync is done.
        self.hold_thread: int | None = None
        self._held: list = []
        self.passes = 0  # passes run since start (tests and the bench read it)
        self._quiet_until = 0.0  # monotonic: no channel was configured at the last pass

    def wake(self, reason: str = "event") -> None:
        """Ask for a pass soon; returns at once (never waits for a send)."""
        if self.hold_thread is not None and threading.get_ident() == self.hold_thread:
            self._held.append(reason)  # only that thread touches the list
            return
        self._enqueue(reason)

    def release(self, durable: bool = True) -> None:
        """The hold thread's batch is done: pass its wake-ups on, or drop them when its
        fsync failed (those callbacks were not answered; the tick finds what was kept)."""
        if not self._held:
            return
        held, self._held = self._held, []
        if durable:
            for reason in held:
                self._enqueue(reason)

    def running(self) -> bool:
        """Whether a sender thread exists now."""
        with self._lock:
            return self._thread is not None

    def _enqueue(self, reason: str) -> None:
        if reason != TICK and time.monotonic() < self._quiet_until:
            return  # nothing to send through: the events wait in the database
        with self._lock:
            if len(self._wakes) == QUEUE_MAX:
                self.dropped += 1
                self._unlogged += 1
            self._wakes.append((time.monotonic(), reason))
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="qlshadow-sender",
                                          daemon=True)
                try:
                    thread.start()
                except RuntimeError as exc:  # no thread to be had: the tick sends it
                    log.warning("alert sender: cannot start its thread (%s); the next tick "
                                "sends what is due", exc)
                    return
                self._thread = thread

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    if not self._wakes:
                        self._thread = None
                        return
                    tick = any(reason == TICK for _at, reason in self._wakes)
                    self._wakes.clear()  # one pass serves every wake-up so far
                    dropped, self._unlogged = self._unlogged, 0
                if dropped:
                    log.warning("alert sender: %d wake-up(s) dropped (the oldest) while it was "
                                "busy; their alerts are sent by this pass", dropped)
                try:
                    self._tick() if tick else self._pass()
                except Exception as exc:  # noqa: BLE001 - the database's or a bug: the tick sends it
                    log.warning("alert sender: %s; the next tick sends what is due",
                                str(exc).strip().splitlines()[0] if str(exc).strip()
                                else type(exc).__name__)
        finally:
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None

    def _pass(self) -> None:
        from qlshadow.storage import db
        from qlshadow.watch import alerts
        self.passes += 1
        channels = self._channels() if self._channels is not None else self._configured()
        if not channels:
            self._quiet_until = time.monotonic() + NO_CHANNEL_RECHECK
            return  # the events wait in the database, as they do for the tick
        self._quiet_until = 0.0
        send = self._send
        if send is None:
            from qlshadow.watch.notify import send
        models = db.database
        before = models.bind_thread(self.database)
        try:
            with self.database.connection_context():
                while True:
                    now = int(time.time())
                    alerts.queue_events(channels, now)
                    done = sum(1 for _ in alerts.deliver(self.settings, channels, now, send))
                    if done < alerts.SENDS_PER_TICK:
                        return
        finally:
            models.bind_thread(before)

    def _tick(self) -> None:
        """The minute's tick the crontab's tick line asked for (service_tick.py): the whole
        of alerts.tick, in this thread, so the service has one sender at a time."""
        from qlshadow.storage import db
        from qlshadow.watch.service_tick import tick_once
        models = db.database
        before = models.bind_thread(self.database)
        try:
            tick_once(self.settings, self.database)
        finally:
            models.bind_thread(before)

    def _configured(self) -> list:
        """The channels the service's settings configure, read now (an edit of
        QL_NOTIFY_FILE reaches the next alert, as it does the tick's)."""
        from qlshadow.watch import notify
        try:
            sources = notify.load_sources(config_file=self.settings.config_file)
            return notify.configured_channels(sources.values, sources.origin)
        except (ValueError, OSError) as exc:  # a bad setting: `qlshadow notify --test` names it
            log.warning("alert sender: the channels cannot be read: %s", exc)
            return []


def install(app, channels=None, send=None) -> Sender:
    """Give app a sender (serve does; a test app has none unless a test gives it one)."""
    from qlshadow.core.runtime import KEY as RUNTIME_KEY
    sender = Sender(app.extensions["qlshadow"], app.extensions[RUNTIME_KEY].database,
                    channels, send)
    app.extensions[KEY] = sender
    return sender


def of(app) -> Sender | None:
    """The app's sender, or None."""
    return app.extensions.get(KEY)


def wake(app, reason: str = "event") -> bool:
    """Wake app's sender if it has one; False when it has none (nothing is sent then until
    the next tick)."""
    sender = app.extensions.get(KEY)
    if sender is None:
        return False
    sender.wake(reason)
    return True
