"""End to end through `qlshadow serve` (waitress) on a free loopback port: health, the 2.x
shell's running+idle pair with the token from `qlshadow token system`, the start-up line."""
from __future__ import annotations

import os
import re
import threading
from http.client import HTTPConnection

import pytest

from helpers import FIXTURES, ONE_BACKEND, http


def _raw_fixture(name: str, cron_id: int) -> bytes:
    with open(os.path.join(FIXTURES, name + ".json"), "rb") as fh:
        raw = fh.read()
    return raw.replace(b'"ids":["12"]', f'"ids":["{cron_id}"]'.encode())


def test_health_answers_through_waitress(live_server):
    server = live_server()

    status, body = http("GET", server.url + "/health")

    assert status == 200
    assert (body["code"], body["data"]["status"], body["data"]["db"]) == (200, "ok", "ok")


def test_the_2x_shell_pair_updates_the_cron_exactly_as_2x(live_server):
    server = live_server()
    for n in range(12):  # the fixtures name cron 12, as the shell would
        status, _ = http("POST", server.url + "/open/crons", headers=server.headers,
                         body={"name": f"job{n + 1}", "command": "task x.sh", "schedule": "*/5 * * * *"})
        assert status == 200
    url = server.url + "/open/crons/status"
    # curl -d: PUT with curl's default form Content-Type; the body is JSON all the same.
    form = {**server.headers, "Content-Type": "application/x-www-form-urlencoded"}

    first = http("PUT", url, _raw_fixture("callback_running", 12), form)
    during = http("GET", server.url + "/open/crons/12", headers=server.headers)[1]["data"]
    second = http("PUT", url, _raw_fixture("callback_idle", 12), form)
    after = http("GET", server.url + "/open/crons/12", headers=server.headers)[1]["data"]
    [instance] = http("GET", server.url + "/open/crons/12/instances", headers=server.headers)[1]["data"]

    assert first == second == (200, {"code": 200})
    assert (during["status"], during["pid"], during["log_path"], during["last_execution_time"]) == (
        0, 4242, "backup/2026-11-30-08-00-00-123.log", 1764489600)
    assert (after["status"], after["pid"], after["log_path"], after["last_execution_time"],
            after["last_running_time"]) == (1, 4242, "backup/2026-11-30-08-00-00-123.log", 1764489600, 7)
    assert (instance["pid"], instance["started_at"], instance["status"], instance["exit_code"]) == (
        4242, 1764489600, 1, 0)
    assert isinstance(instance["finished_at"], int)


def test_busybox_wget_style_post_is_accepted(live_server):
    server = live_server()
    http("POST", server.url + "/open/crons", headers=server.headers,
         body={"name": "backup", "command": "task backup.sh", "schedule": "@boot"})
    headers = {**server.headers, "Content-Type": "application/json"}

    status, body = http("POST", server.url + "/open/crons/status",
                        _raw_fixture("callback_running", 1), headers)

    assert (status, body) == (200, {"code": 200})
    assert http("GET", server.url + "/open/crons/1", headers=server.headers)[1]["data"]["status"] == 0


@ONE_BACKEND
def test_every_error_through_waitress_is_json(live_server):
    server = live_server()
    cases = [("GET", "/nothing", None, {}, 404), ("GET", "/open/crons/status", None, server.headers, 405),
             ("PUT", "/open/crons/status", b"{", server.headers, 400),
             ("GET", "/open/crons", None, {}, 401),
             ("PUT", "/OPEN/crons/status", b"{}", {}, 400)]
    for method, path, body, headers, expected in cases:
        status, answer = http(method, server.url + path, body, headers)
        assert (status, answer["code"]) == (expected, expected), path
        assert set(answer) == {"code", "message"}


def test_the_start_up_line_is_one_line_naming_url_database_scheduler_and_origins(
        live_server, backend, db_url):
    server = live_server(QL3_SHADOW_ORIGINS="scheduled_system")
    database = (re.escape(f"sqlite:{db_url[len('sqlite:///'):]}") + r" \(wal\)" if backend == "sqlite"
                else re.escape("postgresql://127.0.0.1:5432/" + db_url.rsplit("/", 1)[1]))

    lines = server.output().splitlines()

    assert len(lines) == 1, lines
    # QL_THREADS unset: two worker threads on SQLite, four on PostgreSQL.
    threads = 2 if backend == "sqlite" else 4
    assert re.fullmatch(rf"qlshadow serving http://127\.0\.0\.1:{server.port} database={database} "
                        rf"scheduler=node shadow_origins=scheduled_system threads={threads}",
                        lines[0]), lines[0]


def test_the_start_up_line_says_when_shadow_is_off(live_server):
    server = live_server()

    assert " scheduler=node shadow_origins=off " in server.output().splitlines()[0]


@pytest.mark.parametrize("backend", ["postgres"])
def test_the_start_up_line_never_shows_a_database_password(live_server, db_url):
    # The test server trusts loopback, so the password is carried but never checked.
    server = live_server(QL_DB_URL=db_url.replace("postgres@", "postgres:s3cr3t-pw@"))

    assert "/" + db_url.rsplit("/", 1)[1] in server.output()
    assert "s3cr3t-pw" not in server.output()


@ONE_BACKEND
def test_queued_requests_log_no_queue_depth_warnings(live_server):
    # One worker thread and many keep-alive clients: requests queue up behind it, which
    # waitress reports at WARNING on its waitress.queue logger unless that is muted.
    server = live_server(QL_THREADS="1")
    statuses = []

    def client():
        connection = HTTPConnection("127.0.0.1", server.port, timeout=30)
        for _ in range(40):
            connection.request("GET", "/health")
            response = connection.getresponse()
            response.read()
            statuses.append(response.status)
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert statuses == [200] * 320
    assert "queue depth" not in server.output().lower()
    assert len(server.output().splitlines()) == 1


@ONE_BACKEND
def test_sigterm_stops_the_server_cleanly_with_exit_status_0(live_server):
    import signal
    server = live_server()
    assert http("GET", server.url + "/health")[0] == 200

    server.process.send_signal(signal.SIGTERM)

    assert server.process.wait(10) == 0
    assert "Traceback" not in server.output()
