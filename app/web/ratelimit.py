"""Failed sign-ins per client address, in a table of fixed size (no Flask, no database).

`/page/login` and `/open/auth/token` take a guess at a secret each; an address that guessed
wrong LIMIT times within WINDOW seconds is refused (429 with Retry-After) until its window
ends, right guesses included, so the refusal tells nothing. Only failures count: a client
with the right secret is never slowed. Memory is bounded: at most SIZE addresses are
tracked, the least recently seen is forgotten first. IPv6 addresses count per /64, the
block one host usually holds. Behind a reverse proxy every client shares its address.
"""
from __future__ import annotations

import ipaddress
import threading
import time
from collections import OrderedDict

LIMIT = 10
WINDOW = 300
SIZE = 1024


def client_key(address: str | None) -> str:
    """The address a limit counts for: IPv4 as is, IPv6 by its /64."""
    try:
        parsed = ipaddress.ip_address((address or "").split("%", 1)[0])
    except ValueError:
        return address or "?"
    if parsed.version == 4:
        return str(parsed)
    if parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    return str(ipaddress.ip_network(f"{parsed}/64", strict=False))


class FailureLimiter:
    """Counts failures per key in fixed windows; thread-safe, at most `size` keys."""

    def __init__(self, limit: int = LIMIT, window: int = WINDOW, size: int = SIZE,
                 clock=time.monotonic):
        self.limit, self.window, self.size, self.clock = limit, window, size, clock
        self._table: OrderedDict = OrderedDict()  # key -> [window start, failures]
        self._lock = threading.Lock()

    def retry_after(self, key: str) -> int:
        """Seconds until key may try again; 0 when it may try now."""
        now = self.clock()
        with self._lock:
            entry = self._table.get(key)
            if entry is None or now - entry[0] >= self.window:
                return 0
            if entry[1] < self.limit:
                return 0
            return max(1, int(entry[0] + self.window - now + 0.999))

    def failed(self, key: str) -> None:
        """Count one failure of key."""
        now = self.clock()
        with self._lock:
            entry = self._table.get(key)
            if entry is None or now - entry[0] >= self.window:
                entry = [now, 0]
            entry[1] += 1
            self._table[key] = entry
            self._table.move_to_end(key)
            while len(self._table) > self.size:
                self._table.popitem(last=False)

    def __len__(self) -> int:
        return len(self._table)


def signin_limiter(extensions: dict) -> FailureLimiter:
    """The app's one failure counter, shared by the page's sign-in and /open/auth/token."""
    limiter = extensions.get("qlshadow.signin_limits")
    if limiter is None:
        limiter = extensions.setdefault("qlshadow.signin_limits", FailureLimiter())
    return limiter
