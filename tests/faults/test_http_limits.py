"""Abuse at the HTTP layer through real waitress: huge bodies, slow-loris clients.

waitress reads requests on its event loop and hands only complete requests to the worker
threads, so clients that dribble bytes hold a connection slot (at most connection_limit,
100 by default) but never a worker thread.
"""
from __future__ import annotations

import socket
import threading
import time

import pytest

from helpers import ONE_BACKEND, http
from invariants import Inspector

from .helpers import SHADOW, Execution, json_error, make_crons, send_callback

pytestmark = pytest.mark.faults

SLOW_HEADERS, SLOW_BODIES = 30, 10


def request_head(port: int, token: str, length: int) -> bytes:
    return (f"PUT /open/crons/status HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def read_status_line(sock: socket.socket) -> bytes:
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass  # the server hung up on unread bytes; what it answered before is still here
    return data.split(b"\r\n", 1)[0]


@ONE_BACKEND
def test_a_10_mb_body_is_refused_with_413_and_the_server_stays_healthy(
        live_server, db_url, figures):
    server = live_server(**SHADOW)
    cron_id = make_crons(server.url, server.headers, 1)[0]
    size = 10 * 1024 * 1024
    with Inspector(db_url) as inspector:
        before = inspector.snapshot()
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(request_head(server.port, server.token, size))
            sent = []

            def send_body():
                # The server may answer and hang up before the body is in: that is its right.
                chunk = b"[" * 65536
                try:
                    while sum(sent) < size:
                        sock.sendall(chunk)
                        sent.append(len(chunk))
                except OSError:
                    pass

            sender = threading.Thread(target=send_body, daemon=True)
            sender.start()
            status_line = read_status_line(sock)
            sender.join(30)
        assert inspector.snapshot() == before
    assert status_line.startswith(b"HTTP/1.1 413"), status_line
    execution = Execution(cron_id, 1_764_460_800, 9, "after.log", 0)
    assert send_callback(server.url, server.token, execution.body("idle"))[0] == 200
    assert http("GET", server.url + "/health")[0] == 200
    assert server.process.poll() is None
    with Inspector(db_url) as inspector:
        inspector.check(runs_exactly={execution.eid}, crons={cron_id: {"status": 1}})
    figures(body_bytes=size, body_bytes_sent_before_hangup=sum(sent),
            answer=status_line.decode(errors="replace"))


@ONE_BACKEND
def test_a_body_over_ql_max_body_gets_the_json_413(live_server, db_url):
    server = live_server(**SHADOW)
    with Inspector(db_url) as inspector:
        before = inspector.snapshot()
        status, raw = send_callback(server.url, server.token, b" " * 100_000)
        assert inspector.snapshot() == before
        inspector.check(runs_exactly=set())
    assert status == 413 and json_error(raw)["code"] == 413


@ONE_BACKEND
@pytest.mark.parametrize("threads", [1, 2])  # callbacks on the loop thread either way
def test_slow_loris_clients_do_not_starve_the_worker_threads(live_server, db_url, figures,
                                                            threads):
    server = live_server(**SHADOW, QL_THREADS=str(threads))
    cron_id = make_crons(server.url, server.headers, 1)[0]
    head = request_head(server.port, server.token, 1000)
    # Header dribblers send the request head byte by byte; body dribblers send the whole
    # head, then the 1000-byte body byte by byte.
    slow = []
    for n in range(SLOW_HEADERS + SLOW_BODIES):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        if n >= SLOW_HEADERS:
            sock.sendall(head)
        slow.append((sock, head if n < SLOW_HEADERS else b" " * 1000))
    stop = threading.Event()

    def dribble():
        # Bounded: at most 600 rounds of one byte per socket (a minute), or until stopped.
        for offset in range(600):
            for sock, payload in slow:
                try:
                    sock.send(payload[offset:offset + 1])
                except OSError:
                    pass
            if stop.wait(0.1):
                return

    dribbler = threading.Thread(target=dribble, daemon=True)
    dribbler.start()
    answered, sent = [], set()
    try:
        time.sleep(0.3)  # let every slow socket get its first bytes in
        for n in range(5):
            execution = Execution(cron_id, 1_764_460_800 + n, 100 + n, f"job/{n}.log", 0)
            sent.add(execution.eid)
            for kind in ("running", "idle"):
                answered.append(send_callback(server.url, server.token, execution.body(kind),
                                              timeout=30)[0])
        health = http("GET", server.url + "/health", timeout=30)[0]
    finally:
        stop.set()
        dribbler.join(10)
        for sock, _ in slow:
            sock.close()
    assert answered == [200] * 10 and health == 200
    with Inspector(db_url) as inspector:
        summary = inspector.check(runs_exactly=sent, open_instances=False,
                                  crons={cron_id: {"status": 1}})
    assert summary["runs"] == 5
    figures(slow_header_sockets=SLOW_HEADERS, slow_body_sockets=SLOW_BODIES, worker_threads=threads,
            normal_callbacks_answered=len(answered))
