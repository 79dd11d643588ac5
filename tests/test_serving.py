"""How `serve` runs waitress (app/web/serving.py), over real sockets in processes of their own.

A small WSGI app runs under serving.make_server on a free loopback port (stopped by its
PID): worker threads, the callback lane, errors, pipelining, a client that stops reading.
`qlshadow serve` itself listens on every address of QL_HOST (a hosts file bind-mounted in a
private mount namespace maps localhost to both families) and stops on SIGTERM with one line.
"""
from __future__ import annotations

import os
import pathlib
import re
import select
import shutil
import socket
import sys
import threading

import pytest

from helpers import Serve, clean_env, http, run_cli

TOY_APP = r'''
import sys, threading, time
from qlshadow.web import serving

BIG = 20 * 1024 * 1024  # above waitress's 16 MiB high watermark, where a worker waits
callback_answered = threading.Event()
lock = threading.Lock()
running = [0, 0]  # callbacks in the app now, the most at once


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/big":
        start_response("200 OK", [("Content-Length", str(BIG))])
        return (b"x" * (1024 * 1024) for _ in range(BIG // (1024 * 1024)))
    if path == "/boom":
        raise RuntimeError("a defect in the app")
    if path == "/slow":
        # Slow work that ends only once a callback has been answered beside it.
        callback_answered.wait(60)
        body = b"slow done" if callback_answered.is_set() else b"slow gave up"
    elif path == "/which":
        body = threading.current_thread().name.encode()
    elif path == serving.CALLBACK_PATH and environ.get("QUERY_STRING") == "which":
        body = threading.current_thread().name.encode()
    elif path == serving.CALLBACK_PATH:
        with lock:
            running[0] += 1
            running[1] = max(running)
        time.sleep(0.05)  # long enough for other callbacks to arrive meanwhile
        with lock:
            running[0] -= 1
        callback_answered.set()
        body = b"at most %d at once" % running[1]
    else:
        body = path.encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


server = serving.make_server(app, "127.0.0.1", 0, int(sys.argv[1]), sys.argv[2])
print(f"toy serving http://127.0.0.1:{server.port}", flush=True)
try:
    server.run()
finally:
    server.close()
'''


TOY_STARTUP = re.compile(rb"toy serving (http://(\S+):(\d+))")


@pytest.fixture
def toy_server(tmp_path):
    started = []

    def start(threads: int = 2, lane: str = "loop"):
        server = Serve([sys.executable, "-c", TOY_APP, str(threads), lane],
                       log_path=str(tmp_path / f"toy-{len(started)}.log"), line=TOY_STARTUP)
        started.append(server)
        server.start()
        return server.process, server.port, pathlib.Path(server.log_path)

    yield start
    for server in started:
        server.stop()


def _threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _callbacks_at_once(port: int, count: int) -> list:
    answers = []

    def send():
        answers.append(http("PUT", f"http://127.0.0.1:{port}/open/crons/status", b"{}",
                            timeout=30)[1])

    senders = [threading.Thread(target=send) for _ in range(count)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    return answers


def test_requests_run_on_the_worker_threads_asked_for(toy_server):
    process, port, _ = toy_server(3)

    assert http("GET", f"http://127.0.0.1:{port}/three")[1] == b"/three"
    assert _threads_of(process.pid) == 1 + 3  # waitress's loop and three workers


@pytest.mark.parametrize("threads, lane", [(1, "loop"), (2, "loop"), (2, "lock")])
def test_a_callback_is_answered_while_slow_work_holds_a_worker(toy_server, threads, lane):
    _, port, _ = toy_server(threads, lane)
    slow = []
    worker = threading.Thread(target=lambda: slow.append(
        http("GET", f"http://127.0.0.1:{port}/slow", timeout=90)[1]))
    worker.start()

    answers = _callbacks_at_once(port, 1)
    worker.join()

    # /slow ends only after a callback was answered beside it: with the callback queued
    # behind it, it would have given up instead.
    assert answers == [b"at most 1 at once"]
    assert slow == [b"slow done"]


@pytest.mark.parametrize("lane, callback_thread", [("loop", "MainThread"), ("lock", "waitress"),
                                                   ("off", "waitress")])
def test_the_loop_lane_answers_callbacks_on_the_loop_thread_and_nothing_else(
        toy_server, lane, callback_thread):
    _, port, _ = toy_server(2, lane)

    callback = http("PUT", f"http://127.0.0.1:{port}/open/crons/status?which", b"{}")[1]
    other = http("GET", f"http://127.0.0.1:{port}/which")[1]
    read = http("GET", f"http://127.0.0.1:{port}/open/crons/status?which")[1]

    assert callback.decode().startswith(callback_thread)
    assert other.decode().startswith("waitress") and read.decode().startswith("waitress")


@pytest.mark.parametrize("lane, most", [("loop", b"at most 1 at once"),
                                        ("lock", b"at most 1 at once")])
def test_a_lane_runs_one_callback_at_a_time(toy_server, lane, most):
    _, port, _ = toy_server(4, lane)

    assert max(_callbacks_at_once(port, 8)) == most


def test_without_a_lane_callbacks_overlap_in_the_toy_app(toy_server):
    # The toy app really sees overlaps, so the test above can fail.
    _, port, _ = toy_server(4, "off")

    assert max(_callbacks_at_once(port, 8)) > b"at most 1 at once"


def test_a_client_that_stops_reading_a_large_answer_blocks_no_one(toy_server):
    _, port, _ = toy_server(2)
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(("127.0.0.1", port))
    stalled.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
    stalled.recv(1024)  # its answer has started; from now on it reads nothing

    statuses = [http("GET", f"http://127.0.0.1:{port}/other{n}", timeout=30)[0] for n in range(5)]

    assert statuses == [200] * 5
    stalled.close()
    assert http("GET", f"http://127.0.0.1:{port}/after", timeout=30)[1] == b"/after"


def test_pipelined_requests_on_one_connection_are_answered_in_order(toy_server):
    _, port, _ = toy_server(2)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"".join(f"GET /p{n} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for n in range(20)))
        received = b""
        while received.count(b"HTTP/1.1 200") < 20 or not received.endswith(b"/p19"):
            chunk = conn.recv(65536)
            assert chunk, received
            received += chunk

    assert re.findall(rb"/p\d+", received) == [f"/p{n}".encode() for n in range(20)]


def _answered(socks: list, quiet: float) -> set:
    """The sockets that received an answer, gathered until none came for `quiet` seconds."""
    answered, waiting = set(), set(socks)
    while waiting:
        ready = select.select(list(waiting), [], [], quiet)[0]
        if not ready:
            break
        for sock in ready:
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
        answered.update(ready)
        waiting.difference_update(ready)
    return answered


def test_the_loop_lane_accepts_waiting_connections_up_to_waitress_s_limit(toy_server):
    _, port, _ = toy_server()
    # All connect and ask at once, as crond's jobs do; each keeps its connection open.
    socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(120)]
    try:
        for sock in socks:
            sock.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        served = _answered(socks, quiet=1.0)
        # waitress's connection_limit (100) counts its listening socket and trigger too.
        assert 95 <= len(served) <= 100
        rest = [sock for sock in socks if sock not in served]
        for sock in served:
            sock.close()  # room again: the waiting connections are accepted and served

        assert len(_answered(rest, quiet=5.0)) == len(rest)
    finally:
        for sock in socks:
            sock.close()


def test_an_error_in_the_app_is_a_500_and_the_server_goes_on(toy_server):
    _, port, log_path = toy_server(2)

    status, _ = http("GET", f"http://127.0.0.1:{port}/boom")

    assert status == 500
    assert http("GET", f"http://127.0.0.1:{port}/fine")[1] == b"/fine"
    assert "a defect in the app" in log_path.read_text()  # waitress logged the traceback


# --- `qlshadow serve` on every address of QL_HOST ---------------------------------------------

DUAL_HOSTS = "127.0.0.1 localhost\n::1 localhost ip6-localhost\n"


def _can_bind_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


needs_namespace = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or not _can_bind_ipv6_loopback(),
    reason="needs root for a private mount namespace and an IPv6 loopback")


def _serve(tmp_path, host: str, hosts_file: str | None = None, code: str | None = None) -> Serve:
    """`qlshadow serve` with QL_HOST=host (harness.Serve, not yet started), in a namespace
    seeing hosts_file as /etc/hosts (or the Python code given, which runs it)."""
    data = tmp_path / "data"
    env = clean_env({"QL_DATA_DIR": str(data), "QL_DB_URL": f"sqlite:///{data}/q.db",
                     "QL_HOST": host, "QL_PORT": "0", "QL_SCHEDULER": "node"})
    argv = [sys.executable, "-c", code] if code else None
    wrapper = ()
    if hosts_file is not None:
        # unshare execs sh, which execs Python: the PID Popen gives is the server's own.
        wrapper = [shutil.which("unshare"), "-m", "sh", "-c",
                   'mount --bind "$0" /etc/hosts && exec "$@"', hosts_file]
        argv = argv or [sys.executable, "-m", "qlshadow.cli", "serve"]
    log_path = str(tmp_path / f"serve-{host.replace(':', '_')}.log")
    return Serve(argv, env=env, wrapper=wrapper, log_path=log_path, timeout=60)


def _health(address: str, port: int) -> int:
    return http("GET", f"http://{address}:{port}/health", timeout=30)[0]


@needs_namespace
def test_localhost_mapped_to_both_families_serves_on_both(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text(DUAL_HOSTS)
    with _serve(tmp_path, "localhost", str(hosts)) as server:
        assert server.host == "localhost"
        assert _health("127.0.0.1", server.port) == 200
        assert _health("[::1]", server.port) == 200
    assert server.returncode == 0, server.output()
    assert "Traceback" not in server.output()


@needs_namespace
@pytest.mark.parametrize("host, shown, addresses", [
    ("::", "[::]", ["127.0.0.1", "[::1]"]),  # one IPv6 socket takes IPv4 too (Linux's default)
    ("0.0.0.0", "0.0.0.0", ["127.0.0.1"]),
])
def test_the_wildcard_addresses_serve_on_loopback(tmp_path, host, shown, addresses):
    with _serve(tmp_path, host) as server:
        assert server.host == shown
        assert [_health(address, server.port) for address in addresses] == [200] * len(addresses)


def test_sigterm_says_it_is_stopping_on_one_line_and_exits_0(tmp_path):
    with _serve(tmp_path, "127.0.0.1") as server:
        assert _health("127.0.0.1", server.port) == 200

    lines = server.output().splitlines()
    assert server.returncode == 0
    assert lines[1:] == ["qlshadow: stopping (SIGTERM)"]


def test_a_port_in_use_is_one_line_naming_the_keys(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        data = tmp_path / "data"
        result = run_cli({"QL_DATA_DIR": str(data), "QL_DB_URL": f"sqlite:///{data}/q.db",
                          "QL_HOST": "127.0.0.1", "QL_PORT": str(port), "QL_SCHEDULER": "node"},
                         "serve", check=False)

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"qlshadow: cannot listen on 127.0.0.1:{port} (QL_HOST/QL_PORT): Address already in use"]

