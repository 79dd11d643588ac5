"""Requests waitress cannot parse, sent over raw sockets to a real `qlshadow serve`: each gets
waitress's own 400 and no exception is logged, on the SQLite callback lane (app/web/serving.py)
as without it on PostgreSQL, alone or pipelined after a valid callback."""
from __future__ import annotations

import socket

import pytest

from helpers import STATUS_PATH, http

MALFORMED = {
    "a header line without a colon": b"GET /health HTTP/1.1\r\nHost: x\r\nbadheader\r\n\r\n",
    "a NUL in a header value": b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
    "a space in a header name": b"GET /health HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n",
    "a callback with a broken header": (b"PUT " + STATUS_PATH.encode() + b" HTTP/1.1\r\n"
                                        b"Host: x\r\nContent-Length: 2\r\nbad\r\n\r\n{}"),
}


def _exchange(port: int, data: bytes) -> bytes:
    """Send data on one connection and read until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return received
            received += chunk


def _callback(server, cron_id: int) -> bytes:
    body = (b'{"ids":[%d],"status":1}' % cron_id)
    return (b"PUT " + STATUS_PATH.encode() + b" HTTP/1.1\r\nHost: x\r\n"
            b"Authorization: Bearer " + server.token.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)


def _cron(server) -> int:
    status, body = http("POST", f"{server.url}/open/crons", {"name": "a", "command": "true",
                        "schedule": "* * * * *"},
                        {**server.headers, "Content-Type": "application/json"})
    assert status == 200, body
    return body["data"]["id"]


def _quiet_log(server) -> str:
    # Whatever a request logs is written before its answer; the answers were read.
    return server.output()


@pytest.mark.parametrize("request_bytes", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_request_gets_waitress_s_400_and_logs_no_exception(live_server,
                                                                      request_bytes):
    server = live_server()
    answer = _exchange(server.port, request_bytes)
    assert answer.startswith(b"HTTP/1.0 400 Bad Request\r\n"), answer[:200]
    log = _quiet_log(server)
    assert "exception" not in log.lower() and "Traceback" not in log, log


@pytest.mark.parametrize("request_bytes", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_request_pipelined_after_a_callback_gets_a_400_after_its_answer(
        live_server, request_bytes):
    server = live_server()
    cron_id = _cron(server)
    answer = _exchange(server.port, _callback(server, cron_id) + request_bytes)
    first, _, rest = answer.partition(b"\r\n")
    assert first == b"HTTP/1.1 200 OK", answer[:300]
    assert b'{"code":200}' in rest and b"HTTP/1.0 400 Bad Request\r\n" in rest, answer
    log = _quiet_log(server)
    assert "exception" not in log.lower() and "Traceback" not in log, log
    status, body = http("GET", f"{server.url}/open/crons/{cron_id}", headers=server.headers)
    assert (status, body["data"]["status"]) == (200, 1)  # the callback itself was kept
