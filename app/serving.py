"""How `qlshadow serve` runs waitress: requests answered on its loop thread, or on workers.

waitress reads requests on one I/O loop thread and hands each to a worker thread. With one
worker (the SQLite default) nothing runs in parallel anyway, and every request still pays
for the hand-off: a condition-variable wake-up of the worker, the GIL passing from the loop
to the worker and back, and a trigger-pipe write to wake the loop when the answer is out.
That hand-off cost more CPU than a callback's own SQL (docs/PERFORMANCE.md). So with
QL_THREADS=1 the loop thread answers each request itself, right after the poll that read
it; with more threads waitress runs as usual.

What stays the same on the loop thread: waitress parses, limits and answers requests with
its own code (channel.service), a client that stops reading never blocks the loop (its
answer waits in waitress's buffers, spilling to a temporary file past 1 MiB), and a
request that takes long delays the others exactly as it did with one worker.
"""
from __future__ import annotations

import collections
import logging

from waitress import wasyncore
from waitress.server import create_server

log = logging.getLogger("qlshadow")

# On the loop thread waitress must never wait for its buffers to drain: only this same
# thread could drain them. Its high watermark (16 MiB by default) is where a worker would
# wait for the loop; here it is set beyond any answer the service gives.
_NO_WATERMARK = 1 << 62


class _LoopDispatcher:
    """waitress's task dispatcher interface, running every task on the loop thread.

    waitress calls add_task while it holds the channel's request lock, in the middle of
    reading; the task is kept and run after the poll, when that lock is free.
    """

    def __init__(self):
        self.pending = collections.deque()

    def set_thread_count(self, count: int) -> None:
        pass  # no worker threads

    def add_task(self, channel) -> None:
        self.pending.append(channel)

    def run_pending(self) -> None:
        pending = self.pending
        while pending:
            channel = pending.popleft()
            try:
                channel.service()  # answers every error itself; a defect below is logged
            except Exception:
                log.exception("unexpected error while answering a request on %r", channel)

    def shutdown(self, cancel_pending: bool = True, timeout: float = 5) -> bool:
        while self.pending:
            self.pending.popleft().cancel()
        return True


class LoopServer:
    """A waitress server whose requests are answered on its own loop thread."""

    def __init__(self, app, **options):
        self.dispatcher = _LoopDispatcher()
        self.server = create_server(app, _dispatcher=self.dispatcher,
                                    outbuf_high_watermark=_NO_WATERMARK, **options)
        # The trigger wakes the loop when a worker thread has output; here the loop itself
        # produced it and polls next anyway, so a pipe write per request would be wasted.
        self.server.pull_trigger = _nothing
        self.effective_port = self.server.effective_port

    def run(self) -> None:
        server, dispatcher = self.server, self.dispatcher
        channels, timeout = server._map, server.adj.asyncore_loop_timeout
        poll = wasyncore.poll2 if server.adj.asyncore_use_poll else wasyncore.poll
        try:
            while channels:
                poll(timeout, channels)
                dispatcher.run_pending()
        finally:
            dispatcher.shutdown()

    def close(self) -> None:
        self.server.close()


def _nothing() -> None:
    pass


# The bench turns this off to measure the worker-thread shape side by side.
LOOP_THREAD = True


def make_server(app, threads: int, **options):
    """The server `serve` runs: answered on the loop thread with one thread, else workers."""
    if threads == 1 and LOOP_THREAD:
        return LoopServer(app, **options)
    return create_server(app, threads=threads, **options)
