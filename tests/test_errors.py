"""Errors (CONTRACT.md §2.1): every 4xx/5xx is {"code": N, "message": "..."} JSON, never HTML or a
traceback; every request is one transaction, so a failure writes nothing."""
from __future__ import annotations

import json
import os
import socket
from urllib.parse import urlsplit

import pytest

from qlshadow.storage import db
from qlshadow.storage.models import Cron, RunningInstance
from helpers import ONE_BACKEND, fixture_body, http, table_rows


def assert_json_error(response, status: int) -> dict:
    """The response is exactly {"code": status, "message": <sentence>} as JSON."""
    text = response.get_data(as_text=True)
    assert response.status_code == status, text
    assert response.mimetype == "application/json"
    assert "<html" not in text.lower() and "Traceback" not in text
    body = json.loads(text)
    assert set(body) == {"code", "message"}
    assert body["code"] == status
    assert isinstance(body["message"], str) and body["message"].strip()
    return body


def running(cron_id, **changes) -> dict:
    return fixture_body("callback_running", **{"ids": [str(cron_id)], **changes})


def snapshot() -> tuple:
    return table_rows(Cron), table_rows(RunningInstance)


@pytest.fixture
def cron(make_cron) -> dict:
    return make_cron()


@ONE_BACKEND
def test_malformed_json_is_a_json_400(client, auth, cron):
    response = client.put("/open/crons/status", data=b'{"ids": [', headers=auth)

    assert_json_error(response, 400)


def test_malformed_json_on_a_cron_change_is_a_json_400(client, auth):
    response = client.post("/open/crons", data=b"name=backup", headers=auth)

    assert_json_error(response, 400)
    assert table_rows(Cron) == []


@ONE_BACKEND
def test_a_wrong_type_is_a_json_400(client, auth, cron):
    response = client.put("/open/crons/status", json=running(cron["id"], status=True), headers=auth)

    assert_json_error(response, 400)


def test_empty_ids_are_a_json_400(client, auth, cron):
    before = snapshot()

    response = client.put("/open/crons/status", json=running(cron["id"], ids=[]), headers=auth)

    assert "ids" in assert_json_error(response, 400)["message"]
    assert snapshot() == before


@ONE_BACKEND
def test_an_unknown_route_is_a_json_404(client):
    assert_json_error(client.get("/nothing/here", headers={"Accept": "text/html"}), 404)


@ONE_BACKEND
def test_an_unknown_open_route_is_a_json_404_with_or_without_token(client, auth):
    assert_json_error(client.get("/open/nothing"), 404)
    assert_json_error(client.get("/open/crons/1/nothing", headers=auth), 404)


@ONE_BACKEND
def test_a_wrong_method_is_a_json_405(client, auth):
    assert_json_error(client.get("/open/crons/status", headers=auth), 405)
    assert_json_error(client.delete("/health"), 405)
    assert_json_error(client.patch("/open/crons", headers=auth), 405)


@pytest.mark.parametrize("shadow_env", [{"QL_MAX_BODY": "1024"}])
def test_a_body_over_ql_max_body_is_a_json_413_that_writes_nothing(client, auth, cron):
    body = running(cron["id"], padding="x" * 1100)
    before = snapshot()

    response = client.put("/open/crons/status", json=body, headers=auth)

    assert "1024" in assert_json_error(response, 413)["message"]
    assert snapshot() == before


@pytest.mark.parametrize("shadow_env", [{"QL_MAX_BODY": "1024"}])
def test_a_body_of_exactly_ql_max_body_bytes_is_accepted(client, auth, cron):
    body = running(cron["id"])
    raw = json.dumps(body).encode()
    raw = raw[:-1] + b',"padding":"' + b"x" * (1024 - len(raw) - 13) + b'"}'
    assert len(raw) == 1024

    response = client.put("/open/crons/status", data=raw, headers=auth)

    assert response.status_code == 200


@ONE_BACKEND
def test_the_default_limit_refuses_a_100_kb_body_with_json_413(client, auth, cron):
    body = running(cron["id"], padding="x" * 100_000)

    response = client.put("/open/crons/status", json=body, headers=auth)

    assert_json_error(response, 413)


@ONE_BACKEND
def test_an_unexpected_exception_is_a_json_500_without_traceback(app, caplog):
    def explode():
        raise RuntimeError("secret internals")
    app.add_url_rule("/explode", "explode", explode)

    response = app.test_client().get("/explode")

    body = assert_json_error(response, 500)
    assert "secret internals" not in body["message"]
    assert any(r.exc_info and "secret internals" in str(r.exc_info[1]) for r in caplog.records)


def test_the_database_down_is_a_json_503(client, auth, cron, backend, db_url):
    _take_database_down(backend, db_url)

    response = client.get("/open/crons", headers=auth)

    assert_json_error(response, 503)


def test_a_callback_when_the_database_is_down_is_a_json_503(client, auth, cron, backend, db_url):
    _take_database_down(backend, db_url)

    response = client.put("/open/crons/status", json=running(cron["id"]), headers=auth)

    assert_json_error(response, 503)


def _take_database_down(backend: str, db_url: str) -> None:
    """Make the database really unreachable for the next connection (and the open one)."""
    db.discard_connection()
    if backend == "sqlite":
        path = db_url[len("sqlite:///"):]
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
        os.mkdir(path)  # a directory where the file was: every open fails
    else:
        from helpers import drop_pg_database
        drop_pg_database(urlsplit(db_url).path.lstrip("/"))


# --- one transaction per request ------------------------------------------------------------

def _fail_updates_of(backend: str, cron_id: int) -> None:
    """Install a trigger that makes the database refuse any update of one cron."""
    with db.database.connection_context():
        if backend == "sqlite":
            db.database.execute_sql(
                f"CREATE TRIGGER fail_cron BEFORE UPDATE ON crons WHEN NEW.id = {cron_id} "
                "BEGIN SELECT RAISE(ABORT, 'injected failure'); END")
        else:
            db.database.execute_sql(
                "CREATE FUNCTION fail_cron() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "RAISE EXCEPTION 'injected failure' USING ERRCODE = 'check_violation'; END $$")
            db.database.execute_sql(
                f"CREATE TRIGGER fail_cron BEFORE UPDATE ON crons FOR EACH ROW "
                f"WHEN (NEW.id = {cron_id}) EXECUTE FUNCTION fail_cron()")


def test_a_callback_failing_on_its_second_id_rolls_back_the_first(client, auth, make_cron, backend):
    first, second = make_cron(name="a"), make_cron(name="b")
    _fail_updates_of(backend, second["id"])
    before = snapshot()

    response = client.put("/open/crons/status", headers=auth,
                          json=running(first["id"], ids=[str(first["id"]), str(second["id"])]))

    assert_json_error(response, 409)
    assert snapshot() == before


def test_the_service_goes_on_after_a_failed_transaction(client, auth, make_cron, backend):
    first, second = make_cron(name="a"), make_cron(name="b")
    _fail_updates_of(backend, second["id"])
    client.put("/open/crons/status", headers=auth,
               json=running(first["id"], ids=[str(first["id"]), str(second["id"])]))

    response = client.put("/open/crons/status", headers=auth, json=running(first["id"]))

    assert response.status_code == 200
    assert [r["status"] for r in table_rows(Cron)] == [0, 1]


def test_a_cron_change_failing_in_the_database_writes_nothing(client, auth, make_cron, backend):
    cron = make_cron()
    _fail_updates_of(backend, cron["id"])

    response = client.put("/open/crons", json={"id": cron["id"], "name": "renamed"}, headers=auth)

    assert_json_error(response, 409)
    assert table_rows(Cron)[0]["name"] == "backup"


# --- through a real waitress server ---------------------------------------------------------

@ONE_BACKEND
def test_waitress_answers_a_100_kb_body_with_the_json_413(live_server, make_settings):
    server = live_server()
    body = running(1, padding="x" * 100_000)

    status, answer = http("PUT", server.url + "/open/crons/status", body, server.headers)

    assert (status, answer["code"]) == (413, 413)
    assert set(answer) == {"code", "message"}


@ONE_BACKEND
def test_waitress_refuses_a_body_above_its_backstop_before_the_app(live_server):
    server = live_server()
    declared = 2 * 1024 * 1024
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"PUT /open/crons/status HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\n"
                     + f"Authorization: Bearer {server.token}\r\n".encode()
                     + f"Content-Length: {declared}\r\n\r\n".encode() + b"{" + b" " * 65536)
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk

    assert reply.startswith(b"HTTP/1.1 413")
    assert b"Traceback" not in reply


@ONE_BACKEND
def test_waitress_answers_a_chunked_body_over_the_limit_with_the_json_413(live_server):
    from http.client import HTTPConnection
    server = live_server()
    body = json.dumps(running(1, padding="x" * 100_000)).encode()
    connection = HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request("PUT", "/open/crons/status", body=iter([body[:50_000], body[50_000:]]),
                           headers={**server.headers, "Transfer-Encoding": "chunked"},
                           encode_chunked=True)
        response = connection.getresponse()
        status, answer = response.status, json.loads(response.read())
    finally:
        connection.close()

    assert (status, answer["code"]) == (413, 413)


@ONE_BACKEND
@pytest.mark.parametrize("chunked", [False, True])
def test_waitress_delivers_a_callback_body_within_the_limit_whole(live_server, chunked):
    # The fast path reads a declared body straight from waitress and anything else through
    # werkzeug's stream: both must hand the whole body over.
    from http.client import HTTPConnection
    server = live_server()
    status, cron = http("POST", server.url + "/open/crons", headers=server.headers,
                        body={"name": "chunky", "command": "true", "schedule": "* * * * *"})
    assert status == 200
    body = json.dumps({"ids": [cron["data"]["id"]], "status": 0, "pid": 4242,
                       "log_path": "/tmp/" + "l" * 900 + ".log"}).encode()
    connection = HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        if chunked:
            connection.request("PUT", "/open/crons/status", body=iter([body[:300], body[300:]]),
                               headers={**server.headers, "Transfer-Encoding": "chunked"},
                               encode_chunked=True)
        else:
            connection.request("PUT", "/open/crons/status", body=body, headers=server.headers)
        response = connection.getresponse()
        assert (response.status, response.read()) == (200, b'{"code":200}\n')
    finally:
        connection.close()
    status, found = http("GET", f"{server.url}/open/crons/{cron['data']['id']}", headers=server.headers)
    assert (found["data"]["pid"], found["data"]["log_path"]) == (4242, "/tmp/" + "l" * 900 + ".log")
