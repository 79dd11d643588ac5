"""`qlshadow serve`: waitress on every address of QL_HOST (one host, or a comma list of
them), callbacks never behind slow work.

The listening sockets are bound here and handed to waitress through its documented `sockets`
adjustment: a name such as `localhost` that resolves to 127.0.0.1 and ::1 gets one socket
per address, all on one port (QL_PORT=0 picks one free port for all of them: crontab lines
and task.sh call one URL). Slow requests (a crontab install, the 7-day gate, a page) run on
waitress's worker threads (its documented `threads` adjustment).

Callbacks take a "callback lane" of their own, one of two kinds:
- "loop" (SQLite's default): each callback is answered on waitress's I/O loop thread right
  after the poll that read it, never queued behind a worker. A hand-off to a worker costs
  more CPU than the callback's own SQL (about 1.6 times the CPU per callback,
  docs/PERFORMANCE.md). On SQLite at synchronous=full the callbacks of one poll are one
  group commit (group_commit.py): their answers are held until one fsync made them all
  durable, and the listening sockets accept every waiting connection at once, so that
  callbacks arriving together are read by the same poll. This needs waitress names it
  does not document, all in waitress_compat.py; a waitress that lacks one of them gets one
  warning line at start-up naming it, and the "lock" lane.
- "lock": callbacks run on the worker threads, one at a time (a lock): several threads
  running callbacks at once only pass the GIL and SQLite's write lock around.
PostgreSQL's default is no lane: its statements wait on round trips that other worker
threads can use.
"""
from __future__ import annotations

import logging
import signal
import socket
import sys
import threading

from qlshadow.core.callback import PATH as CALLBACK_PATH  # the requests that take the lane

log = logging.getLogger("qlshadow")

# Seconds a thread may hold the GIL while another waits for it (Python's default: 0.005).
# Each SQLite call releases the GIL; when a thread rendering a page or computing the gate
# holds it, the callback thread waits for the rest of that interval before each statement.
# 0.5 ms bounds that wait at a tenth; its cost, more frequent hand-offs while threads take
# turns, is measured in docs/PERFORMANCE.md. Never a question of correctness: every shared
# structure here is behind a lock or the database.
SWITCH_INTERVAL = 0.0005


class ListenError(Exception):
    """QL_HOST/QL_PORT cannot be listened on (one line, naming the keys)."""


class CallbackLane:
    """The "lock" lane, as WSGI middleware: callbacks one at a time, other requests beside."""

    def __init__(self, app, path: str = CALLBACK_PATH):
        self.app = app
        self.path = path
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") != self.path:
            return self.app(environ, start_response)
        with self.lock:
            # The callback's answer is a list, complete when the app returns: nothing of it
            # runs after the lane is released.
            return self.app(environ, start_response)


def listen_sockets(hosts, port: int) -> list:
    """Bound (not yet listening) TCP sockets, one per address the host (or each of a list
    of hosts) resolves to, all on one port.

    With port 0 the first address picks a free port and the others bind that same port;
    if another program holds it on a later address, the whole set is tried again.
    """
    hosts = [hosts] if isinstance(hosts, str) else list(hosts)
    infos = []
    for host in hosts:
        try:
            infos += socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                        flags=socket.AI_PASSIVE)
        except (OSError, UnicodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise ListenError(f"QL_HOST={host!r} does not resolve to an address: {reason}") from None
    host = ",".join(hosts)
    addresses = {}  # (family, address) -> socket address; a hosts file may repeat a line
    for family, _, _, _, address in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            addresses.setdefault((family, address[0]), address)
    if not addresses:
        raise ListenError(f"QL_HOST={host!r} resolves to no IPv4 or IPv6 address")
    both_families = len({family for family, _ in addresses}) == 2
    for _ in range(1 if port else 20):
        sockets, chosen = [], port
        try:
            for (family, _), address in addresses.items():
                sock = socket.socket(family, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6 and both_families:
                    # "::" beside "0.0.0.0" would otherwise claim the IPv4 port too.
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind((address[0], chosen, *address[2:]))
                chosen = sock.getsockname()[1]
            return sockets
        except OSError as exc:
            for sock in sockets:
                sock.close()
            error = exc
            if port or len(sockets) <= 1:
                break  # the port asked for, or the first address: trying again changes nothing
    raise ListenError(f"cannot listen on {host}:{port} (QL_HOST/QL_PORT): "
                      f"{error.strerror or error}")


class Server:
    """A waitress server on bound sockets: run() until SIGTERM or close()."""

    def __init__(self, app, sockets: list, threads: int, loop_lane: bool = False,
                 group=None, **options):
        from qlshadow.web import waitress_compat
        self.sockets = sockets
        self.port = sockets[0].getsockname()[1]
        self.lane = None
        if loop_lane:
            self.waitress, self.lane = waitress_compat.loop_server(
                app, sockets, threads, CALLBACK_PATH, group, **options)
        else:
            from waitress.server import create_server
            self.waitress = create_server(app, sockets=sockets, threads=threads, **options)

    def run(self) -> None:
        """Serve until the loop is stopped (SystemExit from a signal handler, or close())."""
        if self.lane is None:
            self.waitress.run()
            return
        from qlshadow.web import waitress_compat
        waitress_compat.run_loop(self.waitress, self.lane)

    def close(self) -> None:
        """Stop the worker threads and close every socket."""
        self.waitress.close()
        for sock in self.sockets:
            sock.close()


LANES = ("loop", "lock", "off")


def make_server(app, host, port: int, threads: int, callback_lane: str,
                group=None, **options) -> Server:
    """A waitress server for app on every address of host (one, or a list), callbacks in callback_lane
    ("loop", "lock" or "off"; see the module's docstring), the loop lane's batches made
    durable by group (a group_commit.GroupCommit, or None); options: waitress adjustments."""
    if callback_lane not in LANES:
        raise ValueError(f"callback_lane must be one of {LANES}, not {callback_lane!r}")
    if callback_lane == "lock":
        app = CallbackLane(app)
    return Server(app, listen_sockets(host, port), threads, callback_lane == "loop",
                  group if callback_lane == "loop" else None, **options)


def url_host(host: str) -> str:
    """host as it stands in a URL (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host


def serve(settings, threads: int | None = None, callback_lane: str | None = None,
          switch_interval: float = SWITCH_INTERVAL, group_commit: bool = True) -> int:
    """Run the service until SIGTERM; returns the exit status (0).

    threads (default QL_THREADS), callback_lane (default: "loop" on SQLite, "off" on
    PostgreSQL), switch_interval and group_commit (the loop lane's batches synced together
    at synchronous=full; off: each callback's commit fsyncs) are parameters so that
    scripts/bench.py can compare designs without patching anything.
    """
    from qlshadow import config
    from qlshadow.host import crontab
    from qlshadow.storage import db
    from qlshadow.core.runtime import KEY as RUNTIME_KEY
    from qlshadow.web.views import create_app
    app = create_app(settings)
    threads = settings.threads if threads is None else threads
    if callback_lane is None:
        callback_lane = "loop" if db.is_sqlite() else "off"
    if callback_lane == "loop":
        from qlshadow.web import waitress_compat
        absent = waitress_compat.check()
        if absent:
            print(f"qlshadow: warning: {absent}; callbacks run on the worker threads, "
                  "one at a time", file=sys.stderr, flush=True)
            callback_lane = "lock"
    # A short GIL switch interval (see SWITCH_INTERVAL): set once, for this process only.
    sys.setswitchinterval(switch_interval)
    handler = logging.StreamHandler()
    handler.setFormatter(_LogFormat())
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    # waitress warns "Task queue depth is N" for every queued request: a crond burst would
    # fill a router's log with them.
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    backstop = max(1024 * 1024, settings.max_body * 2)
    journal = app.extensions["qlshadow.journal"]
    group = None
    if group_commit and callback_lane == "loop" and journal == "wal" and \
            settings.sqlite_synchronous == "full":
        # At normal no commit fsyncs anyway; outside WAL mode there is no WAL to sync, and
        # NORMAL there could leave a torn file after a power cut.
        from qlshadow.storage.group_commit import GroupCommit
        group = GroupCommit(db.database.obj, app.extensions[RUNTIME_KEY].writes.note_failed)
    try:
        server = make_server(app, settings.hosts, settings.port, threads, callback_lane, group,
                             max_request_body_size=backstop, ident="qlshadow",
                             clear_untrusted_proxy_headers=True)
    except ListenError as exc:
        raise config.ConfigError(str(exc)) from None
    if settings.port == 0:
        # Port 0 picked a free port: crontab lines, manual runs and the ticks of the sender
        # (which reinstall a fleet host's block) must call the real one.
        settings = config.with_port(settings, server.port)
        app.extensions["qlshadow"] = settings
    from qlshadow.watch import sender as alert_sender
    sender = alert_sender.install(app)
    if server.lane is not None:
        # The loop lane's callbacks are durable only after the batch's fsync: their
        # wake-ups wait for it (watch/sender.py).
        sender.hold_thread = server.lane.loop_thread
        server.lane.after_batch = sender.release
    try:
        crontab.protect_data_dir(settings)
        _protect_secrets(settings)
        _startup_crontab(settings)
        database = db.describe(db.database.obj) + (f" ({journal})" if journal else "")
        origins = ",".join(sorted(settings.shadow_origins)) or "off"
        urls = " ".join(f"http://{url_host(host)}:{server.port}" for host in settings.hosts)
        print(f"qlshadow serving {urls} "
              f"database={database} scheduler={settings.scheduler} shadow_origins={origins} "
              f"threads={threads}", flush=True)
        if journal and journal != "wal":
            print(f"qlshadow: warning: SQLite journal mode is {journal}, not wal "
                  "(the filesystem refused WAL)", file=sys.stderr, flush=True)
        # init scripts and procd stop the service with SIGTERM: leave the loop, say so on one
        # line, close the sockets and exit 0 instead of dying mid-way.
        stopping = []

        def stop(signum, frame):
            stopping.append(signum)
            raise SystemExit(0)

        signal.signal(signal.SIGTERM, stop)
        try:
            server.run()  # waitress leaves its loop on SystemExit and KeyboardInterrupt
        except (KeyboardInterrupt, SystemExit):
            pass
        if stopping:
            log.info("stopping (SIGTERM)")
    finally:
        server.close()
    return 0


def secret_files(settings) -> list:
    """The files of the data dir that hold secrets (tokens, keys, the database URL, the
    channels' credentials, the users' commands): each is written 0600."""
    import os

    from qlshadow.core import auth
    from qlshadow.host import crontab
    data = os.path.abspath(settings.data_dir)
    names = (auth.RUNNER_TOKEN_FILE, auth.PAGE_KEY_FILE, crontab.RUNNER_ENV,
             crontab.RUNNER_CONF, crontab.NOTIFY_CONF, crontab.RECORD)
    return [os.path.abspath(settings.token_file), os.path.abspath(settings.crontab_file),
            *(os.path.join(data, name) for name in names)]


def _protect_secrets(settings) -> None:
    """Make every secret file 0600 again, one warning line for each that was not."""
    from qlshadow.files import make_private
    for path in secret_files(settings):
        mode = make_private(path)
        if mode is not None:
            print(f"qlshadow: warning: {path} was mode {mode:04o}, readable by other users; "
                  "made it 0600", file=sys.stderr, flush=True)


def _startup_crontab(settings) -> None:
    """Record the install settings for CLI commands, and re-render the crontab so that its
    lines call this server as configured now (only once a block file exists: a first start
    with no crons has nothing to install)."""
    import os

    from qlshadow.host import crontab
    try:
        crontab.record_settings(settings)
    except crontab.CrontabError as exc:
        print(f"qlshadow: warning: CLI commands cannot see where this server installs: {exc}",
              file=sys.stderr, flush=True)
    try:
        # The notify tick that crond starts sends through the channels this server sees.
        crontab.write_notify_conf(settings)
    except (OSError, ValueError) as exc:  # ValueError: config.ConfigError of a bad conf file
        print(f"qlshadow: warning: the notify tick cannot get this server's settings: {exc}",
              file=sys.stderr, flush=True)
    if not os.path.exists(settings.crontab_file):
        from qlshadow.service.fleet import joins
        if not joins(settings):  # a new host of a fleet installs the crons naming it
            return
    try:
        crontab.sync(settings)
    except crontab.CrontabError as exc:
        print(f"qlshadow: warning: crontab not updated: {exc}", file=sys.stderr, flush=True)


class _LogFormat(logging.Formatter):
    """One prefix per server line, like the CLI's: 'qlshadow: warning: ...'.

    Our own loggers add nothing more; another library's line names it once.
    """

    def format(self, record: logging.LogRecord) -> str:
        source = "" if record.name.split(".")[0] == "qlshadow" else f"{record.name}: "
        level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        text = f"qlshadow: {level}{source}{record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text
