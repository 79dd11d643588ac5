"""Every waitress name qlshadow uses that waitress does not document, and nowhere else: the
"loop" callback lane (web/serving.py) is built of them.

They were read from waitress 3.0 (setup.cfg pins TESTED). serve() calls check() before it
picks the loop lane: on a waitress that lacks one of them it prints one warning line naming
it and runs callbacks on the "lock" lane instead (worker threads, one at a time), which
uses only documented adjustments.

The loop lane: waitress hands each parsed request to its task dispatcher as the request's
channel (add_task), from the loop thread while it holds the channel's request lock, or from
a worker that finished the request before it on the same connection. A callback read by the
loop is kept and answered after the poll, when that lock is free; everything else goes to
waitress's worker threads. With a group commit (storage/group_commit.py) the callbacks of
one poll are one batch: each runs its own transaction, and the answers stay in their
channels' buffers (the channel sends nothing) until one fsync made the whole batch durable;
the next poll sends them.
"""
from __future__ import annotations

import collections
import inspect
import logging
import threading

TESTED = "waitress>=3.0.2,<3.1"

# The loop thread answers a callback only on a connection with less than this waiting to be
# sent: waitress makes a thread that writes past its high watermark (16 MiB) wait for the
# loop to drain it, and on the loop itself that wait would never end.
LOOP_OUTBUF_LIMIT = 1024 * 1024

log = logging.getLogger("qlshadow")


def _sets(func, name: str) -> bool:
    """Whether func's code names the attribute (as it does one it assigns on self)."""
    return name in getattr(getattr(func, "__code__", None), "co_names", ())


def missing() -> list:
    """The names the loop lane uses that this waitress lacks, as 'module.name'."""
    import waitress.channel
    import waitress.parser
    import waitress.server
    import waitress.task
    import waitress.wasyncore
    absent = []
    if "_dispatcher" not in inspect.signature(waitress.server.create_server).parameters:
        absent.append("waitress.server.create_server(_dispatcher=)")
    dispatcher = getattr(waitress.task, "ThreadedTaskDispatcher", None)
    for name in ("set_thread_count", "add_task", "shutdown"):
        if not hasattr(dispatcher, name):
            absent.append(f"waitress.task.ThreadedTaskDispatcher.{name}")
    channel = getattr(waitress.channel, "HTTPChannel", None)
    for name in ("send", "service", "handle_close", "cancel", "total_outbufs_len"):
        if not hasattr(channel, name):
            absent.append(f"waitress.channel.HTTPChannel.{name}")
    if not _sets(getattr(channel, "__init__", None), "requests"):
        absent.append("waitress.channel.HTTPChannel.requests")
    parser = getattr(waitress.parser, "HTTPRequestParser", None)
    if not hasattr(parser, "error"):
        absent.append("waitress.parser.HTTPRequestParser.error")
    for name in ("path", "command"):
        if not _sets(getattr(parser, "parse_header", None), name):
            absent.append(f"waitress.parser.HTTPRequestParser.{name}")
    server = getattr(waitress.server, "BaseWSGIServer", None)
    for name in ("handle_accept", "pull_trigger", "accepting"):
        if not hasattr(server, name):
            absent.append(f"waitress.server.BaseWSGIServer.{name}")
    for name in ("adj", "trigger"):
        if not _sets(getattr(server, "__init__", None), name):
            absent.append(f"waitress.server.BaseWSGIServer.{name}")
    if not _sets(getattr(waitress.wasyncore.dispatcher, "__init__", None), "_map"):
        absent.append("waitress.wasyncore.dispatcher._map")
    if not _sets(getattr(getattr(waitress.server, "MultiSocketServer", None), "__init__", None),
                 "map"):
        absent.append("waitress.server.MultiSocketServer.map")
    for name in ("poll", "poll2"):
        if not hasattr(waitress.wasyncore, name):
            absent.append(f"waitress.wasyncore.{name}")
    return absent


def check() -> str | None:
    """One line naming the first missing name and the tested range, or None when all are there."""
    absent = missing()
    if not absent:
        return None
    from importlib.metadata import version
    return (f"waitress {version('waitress')} has no {absent[0]}, which the callback lane uses "
            f"(tested: {TESTED})")


def _not_yet(data, do_close=True) -> int:
    """A channel's send while its answer waits for the batch's fsync: nothing sent yet."""
    return 0


class LoopLane:
    """waitress's task dispatcher interface: callbacks on the loop thread, the rest to workers
    (see the module's docstring)."""

    def __init__(self, path: str, threads: int, group=None):
        from waitress.task import ThreadedTaskDispatcher
        self.workers = ThreadedTaskDispatcher()
        self.workers.set_thread_count(threads)
        self.path = path
        self.group = group
        self.pending = collections.deque()
        self.loop_thread = threading.get_ident()
        # Called with whether the batch is durable once a batch's callbacks were answered
        # (after its fsync): the alert sender's release (serving.serve).
        self.after_batch = None

    def set_thread_count(self, count: int) -> None:
        self.workers.set_thread_count(count)

    def add_task(self, channel) -> None:
        request = channel.requests[0]
        # A request waitress could not parse has no path (nor command): it goes to a worker,
        # which answers it with waitress's own "Bad Request", so the error is tested first.
        if (request.error is None and request.path == self.path
                and request.command in ("PUT", "POST")
                and channel.total_outbufs_len < LOOP_OUTBUF_LIMIT
                and threading.get_ident() == self.loop_thread):
            self.pending.append(channel)
        else:
            self.workers.add_task(channel)

    def run_pending(self) -> None:
        pending, group = self.pending, self.group
        if not pending:
            return
        held = {}  # channels whose answers wait for the batch's fsync (a channel may come twice)
        while pending:
            channel = pending.popleft()
            if group is not None:
                channel.send = _not_yet  # waitress's one way to the socket, held back
                held[channel] = None
            try:
                channel.service()  # answers every error itself; a defect below is logged
            except Exception:
                log.exception("unexpected error while answering a callback on %r", channel)
        durable = True
        if held:
            durable = group.sync()
            for channel in held:
                del channel.send
                if not durable:
                    channel.handle_close()  # no answer rather than one the disk may not keep
        if self.after_batch is not None:
            self.after_batch(durable)

    def shutdown(self, cancel_pending: bool = True, timeout: float = 5) -> bool:
        while self.pending:
            self.pending.popleft().cancel()
        return self.workers.shutdown(cancel_pending, timeout)


def _accept_all(listener):
    """A listening server's handle_accept that takes every connection waiting, not one.

    waitress accepts one connection per poll. The callbacks crond's jobs send at the same
    moment, each task.sh on a connection of its own, would then be read one poll apart, each
    a batch of one with an fsync of its own; accepted together, the next poll reads them all.
    Up to waitress's connection limit, which its own readable() applies between polls.
    """
    accept_one, channels, limit = listener.handle_accept, listener._map, listener.adj.connection_limit

    def handle_accept() -> None:
        while True:
            known = len(channels)
            accept_one()
            if len(channels) == known or len(channels) >= limit:
                return  # nothing was waiting (or accept failed), or the limit is reached
    return handle_accept


def _trigger_from_workers(lane, pull):
    def pull_trigger() -> None:
        if threading.get_ident() != lane.loop_thread:
            pull()
    return pull_trigger


def loop_server(app, sockets: list, threads: int, path: str, group=None, **options):
    """(waitress server, LoopLane): callbacks to path answered on the loop thread."""
    from waitress.server import create_server
    lane = LoopLane(path, threads, group)
    server = create_server(app, sockets=sockets, threads=threads, _dispatcher=lane, **options)
    # A worker pulls a listening server's trigger (a pipe write) to wake the loop when it has
    # output; the loop answering a callback polls next anyway.
    # The map holds the listening servers and their triggers; only a server has both names.
    listeners = getattr(server, "map", {None: server}).values()
    for listener in listeners:
        if hasattr(listener, "pull_trigger") and hasattr(listener, "trigger"):
            listener.pull_trigger = _trigger_from_workers(lane, listener.pull_trigger)
        if getattr(listener, "accepting", False):  # a listening socket's server
            listener.handle_accept = _accept_all(listener)
    return server, lane


def run_loop(server, lane) -> None:
    """waitress's loop, with the lane's callbacks answered after each poll, until a signal
    (SystemExit, KeyboardInterrupt) or close() ends it."""
    from waitress import wasyncore
    lane.loop_thread = threading.get_ident()
    # One socket: the server is its own loop; several: they share the map it returns.
    channels = getattr(server, "map", None) or server._map
    poll = wasyncore.poll2 if server.adj.asyncore_use_poll else wasyncore.poll
    timeout = server.adj.asyncore_loop_timeout
    try:
        while channels:
            poll(timeout, channels)
            lane.run_pending()
    except (SystemExit, KeyboardInterrupt):
        pass  # as waitress's own run(): a signal ends the loop
    finally:
        lane.shutdown()
