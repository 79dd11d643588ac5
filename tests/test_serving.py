"""The loop-thread server of `serve` with QL_THREADS=1 (app/serving.py), over real sockets.

A small WSGI app runs under serving.make_server in its own process on a free loopback port,
stopped by its PID: the loop answers every request itself, so these check what a worker
thread used to guarantee — a client that stops reading blocks nobody, pipelined requests
are answered in order, an app error is a 500 and the loop goes on.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT, http, stop_process

TOY_APP = r'''
import sys
from qlshadow import serving

BIG = 20 * 1024 * 1024  # above waitress's 16 MiB high watermark, where a worker would wait


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/big":
        start_response("200 OK", [("Content-Length", str(BIG))])
        return (b"x" * (1024 * 1024) for _ in range(BIG // (1024 * 1024)))
    if path == "/boom":
        raise RuntimeError("a defect in the app")
    body = path.encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


server = serving.make_server(app, int(sys.argv[1]), host="127.0.0.1", port=0)
print(f"toy serving http://127.0.0.1:{server.effective_port} {type(server).__name__}", flush=True)
try:
    server.run()
except SystemExit:
    pass
finally:
    server.close()
'''


@pytest.fixture
def toy_server(tmp_path):
    started = []

    def start(threads: int = 1):
        log_path = tmp_path / f"toy-{len(started)}.log"
        log = open(log_path, "wb")
        process = subprocess.Popen([sys.executable, "-c", TOY_APP, str(threads)], cwd=ROOT,
                                   stdout=log, stderr=subprocess.STDOUT)
        started.append((process, log))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            match = re.search(rb"toy serving http://127\.0\.0\.1:(\d+) (\w+)", log_path.read_bytes())
            if match:
                return process, int(match.group(1)), match.group(2).decode(), log_path
            assert process.poll() is None, log_path.read_text()
            time.sleep(0.05)
        raise AssertionError("the toy server did not start")

    yield start
    for process, log in started:
        stop_process(process)
        log.close()


def _threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_one_thread_answers_on_the_loop_and_more_threads_use_workers(toy_server):
    process, port, kind, _ = toy_server(1)
    assert http("GET", f"http://127.0.0.1:{port}/one")[1] == b"/one"
    assert kind == "LoopServer"
    assert _threads_of(process.pid) == 1  # no worker thread at all

    process, port, kind, _ = toy_server(3)
    assert http("GET", f"http://127.0.0.1:{port}/three")[1] == b"/three"
    assert kind != "LoopServer"
    assert _threads_of(process.pid) == 1 + 3


def test_a_client_that_stops_reading_a_large_answer_blocks_no_one(toy_server):
    _, port, _, _ = toy_server(1)
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(("127.0.0.1", port))
    stalled.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
    stalled.recv(1024)  # its answer has started; from now on it reads nothing
    time.sleep(0.3)  # the loop has queued what the socket would not take

    started = time.monotonic()
    statuses = [http("GET", f"http://127.0.0.1:{port}/other{n}", timeout=5)[0] for n in range(5)]

    assert statuses == [200] * 5
    assert time.monotonic() - started < 5
    stalled.close()
    assert http("GET", f"http://127.0.0.1:{port}/after", timeout=5)[1] == b"/after"


def test_pipelined_requests_on_one_connection_are_answered_in_order(toy_server):
    _, port, _, _ = toy_server(1)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"".join(f"GET /p{n} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for n in range(20)))
        received = b""
        while received.count(b"HTTP/1.1 200") < 20 or not received.endswith(b"/p19"):
            chunk = conn.recv(65536)
            assert chunk, received
            received += chunk

    assert re.findall(rb"/p\d+", received) == [f"/p{n}".encode() for n in range(20)]


def test_an_error_in_the_app_is_a_500_and_the_loop_goes_on(toy_server):
    _, port, _, log_path = toy_server(1)

    status, _ = http("GET", f"http://127.0.0.1:{port}/boom")

    assert status == 500
    assert http("GET", f"http://127.0.0.1:{port}/fine")[1] == b"/fine"
    assert "a defect in the app" in log_path.read_text()  # waitress logged the traceback

