"""What a request waitress cannot parse leaves in the log of a real `qlshadow serve`: one
short line at most (here: none), never a traceback, whether it comes alone, repeated, or
pipelined after a valid callback; on the SQLite callback lane and on PostgreSQL alike."""
from __future__ import annotations

import pytest

from test_malformed_requests import MALFORMED, _callback, _cron, _exchange

SHORT = 200  # characters: a line, not an exception's report


def _new_lines(server, before: str) -> list:
    after = server.output()
    assert after.startswith(before)
    return after[len(before):].splitlines()


@pytest.mark.parametrize("request_bytes", MALFORMED.values(), ids=MALFORMED.keys())
def test_each_malformed_request_logs_one_short_line_at_most(live_server, request_bytes):
    server = live_server()
    cron_id = _cron(server)
    before = server.output()
    for _ in range(5):
        assert _exchange(server.port, request_bytes).startswith(b"HTTP/1.0 400 Bad Request\r\n")
        assert _exchange(server.port, _callback(server, cron_id) + request_bytes).startswith(
            b"HTTP/1.1 200 OK\r\n")
    lines = _new_lines(server, before)
    assert len(lines) <= 10 and all(len(line) < SHORT for line in lines), lines
