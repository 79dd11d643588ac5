"""scripts/harness.py, the one way tests and benches start `qlshadow serve`: the URL comes
from the start-up line, and the server is stopped by its PID also when the body fails."""
from __future__ import annotations

import socket

import pytest
from helpers import Serve, clean_env, free_port, http


def serve_env(tmp_path, **extra) -> dict:
    data = tmp_path / "data"
    return clean_env({"QL_DATA_DIR": str(data), "QL_DB_URL": f"sqlite:///{data}/q.db",
                      "QL_HOST": "127.0.0.1", "QL_PORT": "0", "QL_SCHEDULER": "node",
                      "QL_CRONTAB_INSTALL": "", **extra})


def test_the_url_is_read_from_the_start_up_line_and_the_server_answers_there(tmp_path):
    with Serve(env=serve_env(tmp_path)) as server:
        assert server.url == f"http://127.0.0.1:{server.port}"
        assert server.startup_line.startswith(f"qlshadow serving {server.url} ")
        assert http("GET", server.url + "/health")[0] == 200
    assert server.returncode == 0  # SIGTERM: a clean stop


def test_a_failing_body_still_stops_the_server(tmp_path):
    with pytest.raises(ZeroDivisionError):
        with Serve(env=serve_env(tmp_path)) as server:
            raise ZeroDivisionError
    assert server.process.poll() is not None


def test_a_server_that_never_serves_raises_with_its_output(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = Serve(env=serve_env(tmp_path, QL_PORT=str(port)))
        with pytest.raises(RuntimeError, match="cannot listen on 127.0.0.1"):
            server.start()
    assert server.process.poll() is not None


def test_free_port_is_a_port_nothing_listens_on():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
