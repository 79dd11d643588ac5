"""Attacks on the bearer check of the callback hot path: refused tokens write nothing,
path tricks do not bypass auth, and no token or secret ever reaches the server's log.

Tokens are looked up by their SHA-256 digest and the digest is compared with
hmac.compare_digest (app/web/views/__init__.py, app/core/auth.py); the tests below check the
behaviour, never timing.
"""
from __future__ import annotations

import hashlib
import json
import secrets
import socket
import threading
import time

import pytest

from qlshadow.storage import db
from qlshadow.core.auth import create_app_record, issue_token
from helpers import ONE_BACKEND, http, run_cli
from invariants import Inspector

from .helpers import SHADOW, Execution, json_error, make_crons, send_callback

pytestmark = [pytest.mark.shadow_on, pytest.mark.faults]

ATTACKS = ["missing", "bearer-alone", "bearer-space", "basic", "very-long", "last-char",
           "truncated", "digest-as-token", "expired", "other-scope"]


@pytest.fixture
def inspector(db_url, app):
    """Snapshots during the test; the whole-database invariants once it is over."""
    with Inspector(db_url) as inspector:
        yield inspector
        inspector.check(runs_exactly=set())


def attack_header(name: str, token: str) -> dict:
    """The Authorization header an attacker (or a broken client) sends."""
    def scoped_token(scopes, age):
        with db.database.connection_context(), db.write_transaction():
            create_app_record(f"app-{secrets.token_hex(4)}", scopes)
            from qlshadow.storage.models import App
            app_id = App.select(App.id).order_by(App.id.desc()).scalar()
            return issue_token(app_id, int(time.time()) - age)[0]

    value = {
        "missing": None,
        "bearer-alone": "Bearer",
        "bearer-space": "Bearer    ",
        "basic": "Basic x",
        "very-long": "Bearer " + "A" * 100_000,
        "last-char": "Bearer " + token[:-1] + ("A" if token[-1] != "A" else "B"),
        "truncated": "Bearer " + token[:-1],
        "digest-as-token": "Bearer " + hashlib.sha256(token.encode()).hexdigest(),
    }.get(name, "")
    if name == "expired":
        value = "Bearer " + scoped_token(["crons"], 31 * 24 * 3600)
    elif name == "other-scope":
        value = "Bearer " + scoped_token(["runs"], 0)
    return {} if value is None else {"Authorization": value}


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_refused_token_on_the_callback_is_a_json_401_or_403_that_wrote_nothing(
        client, token, make_cron, inspector, attack):
    cron = make_cron()
    headers = attack_header(attack, token)
    # The real token has been seen (and cached) first: refusals must not lean on the cache.
    assert client.get("/open/crons", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    before = inspector.snapshot()
    body = Execution(cron["id"], 1_764_460_800, 5, "a.log", 0).body("running")
    response = client.put("/open/crons/status", json=body, headers=headers)
    expected = 403 if attack == "other-scope" else 401
    assert (response.status_code, response.get_json()["code"]) == (expected, expected)
    assert inspector.snapshot() == before
    inspector.check(runs_exactly=set())


@pytest.mark.parametrize("path", ["/OPEN/crons/status", "/open/Crons/status",
                                  "/open/crons/Status", "/Open/runs", "/open/RUNS/failures"])
def test_a_path_case_variant_is_a_400_even_with_a_valid_token(client, auth, make_cron,
                                                              inspector, path):
    cron = make_cron()
    before = inspector.snapshot()
    body = Execution(cron["id"], 1_764_460_800, 5, "a.log", 0).body("running")
    for method in ("GET", "PUT", "POST"):
        response = client.open(path, method=method, json=body, headers=auth)
        assert (response.status_code, response.get_json()["code"]) == (400, 400)
    assert inspector.snapshot() == before


RAW_PATHS = ["//open/crons/status", "/open//crons/status", "/open/crons/./status",
             "/open/crons/%73tatus", "/open/crons/status/", "/open/crons/status?x=/health",
             "/health/../open/crons/status", "/open/auth/../crons/status", "/OPEN/crons/status"]


def raw_put(port: int, path: str, body: bytes, headers: dict) -> tuple:
    """A PUT with the path exactly as given (no client-side normalisation)."""
    head = f"PUT {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        # Send from a thread: the server may answer and hang up before it read everything.
        sender = threading.Thread(target=_send_all, args=(sock, head.encode() + body), daemon=True)
        sender.start()
        raw = b""
        try:
            while chunk := sock.recv(65536):
                raw += chunk
        except ConnectionResetError:
            pass  # after the answer, when the server closed on unread bytes
        sender.join(30)
    status_line, _, rest = raw.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def _send_all(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass


@ONE_BACKEND
def test_path_tricks_through_waitress_never_pass_without_a_token(live_server, db_url, figures):
    server = live_server(**SHADOW)
    cron_id = make_crons(server.url, server.headers, 1)[0]
    with Inspector(db_url) as inspector:
        before = inspector.snapshot()
        answers = {}
        for path in RAW_PATHS:
            body = json.dumps(Execution(cron_id, 1_764_460_800, 5, "a.log", 0).body("running"))
            answers[path] = raw_put(server.port, path, body.encode(), {})
        assert inspector.snapshot() == before
        inspector.check(runs_exactly=set(), crons={cron_id: {"status": 1, "pid": None}})
    assert all(400 <= status < 500 and json_error(raw) for status, raw in answers.values()), \
        {p: (s, raw[:80]) for p, (s, raw) in answers.items() if not (400 <= s < 500 and json_error(raw))}
    figures(paths_tried=len(RAW_PATHS), answers={p: s for p, (s, _) in answers.items()})


@ONE_BACKEND
def test_a_300_kb_authorization_header_is_refused_and_the_server_stays_healthy(
        live_server, db_url, figures):
    server = live_server(**SHADOW)
    with Inspector(db_url) as inspector:
        before = inspector.snapshot()
        status, _ = raw_put(server.port, "/open/crons/status", b'{"ids":[1],"status":0}',
                            {"Authorization": "Bearer " + "A" * 300_000})
        assert inspector.snapshot() == before
        inspector.check(runs_exactly=set())
    assert 400 <= status < 500
    assert http("GET", server.url + "/health")[0] == 200
    figures(header_bytes=300_007, answer=status)


@ONE_BACKEND
def test_no_token_or_secret_ever_reaches_the_server_log(live_server, db_url, tmp_path, figures):
    server = live_server(**SHADOW)
    env = {"QL_DATA_DIR": str(tmp_path / "data"), "QL_DB_URL": db_url,
           "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": ""}
    created = json.loads(run_cli(env, "app", "create", "reporter", "--scopes", "crons").stdout)
    client_id, secret = created["client_id"], created["client_secret"]
    status, issued = http("GET", f"{server.url}/open/auth/token?client_id={client_id}"
                                 f"&client_secret={secret}")
    assert status == 200
    app_token = issued["data"]["token"]
    bad_token = secrets.token_urlsafe(32)
    wrong_secret = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    cron_id = make_crons(server.url, server.headers, 1)[0]
    execution = Execution(cron_id, 1_764_460_800, 5, "a.log", 0)
    answers = [
        send_callback(server.url, server.token, execution.body("running"))[0],
        send_callback(server.url, app_token, execution.body("idle"))[0],
        send_callback(server.url, bad_token, execution.body("idle"))[0],
        send_callback(server.url, server.token + "x", b"{not json")[0],
        http("GET", f"{server.url}/open/auth/token?client_id={client_id}&client_secret={wrong_secret}")[0],
        http("GET", f"{server.url}/OPEN/crons?token={bad_token}", None,
             {"Authorization": f"Bearer {app_token}"})[0],
    ]
    assert answers == [200, 200, 401, 401, 401, 400]
    with Inspector(db_url) as inspector:
        inspector.check(runs_exactly={execution.eid}, open_instances=False,
                        crons={cron_id: {"status": 1, "pid": 5}})
    token_cli = run_cli(env, "token", "system")
    server.stop()
    log = server.output()
    assert "qlshadow serving" in log  # the log is real and was read
    secrets_seen = {name: value for name, value in (
        ("system token", server.token), ("app token", app_token), ("bad token", bad_token),
        ("client secret", secret), ("wrong secret", wrong_secret)) if value in log
        or value in token_cli.stdout + token_cli.stderr}
    assert secrets_seen == {}
    figures(log_bytes=len(log), requests=len(answers), secrets_checked=5, secrets_found=0)

