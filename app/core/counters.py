"""The in-process counters of one app, held by its Runtime: the callback path adds 1 to
a plain integer under one uncontended lock; /metrics (watch/metrics.py) reads them."""
from __future__ import annotations

import threading
import time

# Answers of the status callback, by what they said (the web layer names them).
CALLBACK_RESULTS = ("ok", "invalid", "unauthorized", "forbidden", "too_large", "unavailable",
                    "error")
# What the Shadow writer did with a callback that carried an execution id.
SHADOW_OUTCOMES = ("created", "advanced", "replayed", "invalid_execution_id", "multiple_ids",
                   "unsupported_status", "unknown_cron", "writer_error", "replay_drift")


class Counters:
    """The in-process counters of one app (held by its Runtime).

    The lock makes each increment exact across waitress threads; uncontended it costs well
    under a microsecond, against about a millisecond for a callback's transaction.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._callbacks = dict.fromkeys(CALLBACK_RESULTS, 0)
        self._shadow = dict.fromkeys(SHADOW_OUTCOMES, 0)
        self._write_errors = 0
        self.started = time.time()

    def count_callback(self, result: str) -> None:
        """Count one status-callback answer by its result name (see CALLBACK_RESULTS)."""
        if result not in self._callbacks:
            result = "error"
        with self._lock:
            self._callbacks[result] += 1

    def count_shadow(self, outcome: str) -> None:
        """Count one outcome of the Shadow writer (an unknown name is kept, not dropped)."""
        with self._lock:
            self._shadow[outcome] = self._shadow.get(outcome, 0) + 1

    def count_write_error(self) -> None:
        """Count one request whose database work failed and rolled back."""
        with self._lock:
            self._write_errors += 1

    def snapshot(self) -> dict:
        """A consistent copy of the counters."""
        with self._lock:
            return {"callbacks": dict(self._callbacks), "shadow": dict(self._shadow),
                    "write_errors": self._write_errors}


class Uncounted(Counters):
    """Counters whose callback and Shadow counts stay at zero (Settings.count_metrics=False):
    what those two lock-taking increments cost is measured against it (scripts/bench.py)."""

    def count_callback(self, result: str) -> None:
        pass

    def count_shadow(self, outcome: str) -> None:
        pass
