"""The status callback's one web adapter (views/callback.py, in front of Flask) answers every
fixture, refusal and database error with the right status and a well-formed JSON body
(Content-Type, Content-Length and bytes exactly as every other route's), on both databases."""
from __future__ import annotations

import io
import json
import os
import time

import pytest

from qlshadow.storage import db
from qlshadow.core.auth import create_app_record
from qlshadow.storage.models import Token
from helpers import FIXTURES, SHADOW_ON, fixture_body, legacy_rows
from test_errors import _fail_updates_of, _take_database_down

PATH = "/open/crons/status"
EXECUTION_ID = "legacy-system:1764460800:3f2b8c1e-9d4a-4e6b-8f1a-2c3d4e5f6a7b"


@pytest.fixture(params=[{**SHADOW_ON, "QL_MAX_BODY": "300000"}, {"QL_MAX_BODY": "1024"}],
                ids=["shadow-on", "shadow-off-1024"])
def shadow_env(request) -> dict:
    return request.param


@pytest.fixture
def both(client):
    """send(...) -> the answer (status, type, length, body), checked to be well formed."""

    def send(raw, headers: dict, method: str = "PUT", path: str = PATH, stream=None, **kwargs):
        if stream is not None:  # a body without a length
            kwargs["input_stream"] = io.BytesIO(stream)
        response = client.open(path, method=method, data=raw, headers=headers, **kwargs)
        answer = (response.status, response.headers.get("Content-Type"),
                  response.headers.get("Content-Length"), response.get_data())
        assert well_formed(answer), answer
        return answer
    return send


def well_formed(answer) -> bool:
    """A JSON answer as every route gives it: {"code": N[, "message": ...]}, compact, a newline."""
    status, kind, length, data = answer
    doc = json.loads(data)
    code = int(status[:3])
    expected = {"code": code} if code == 200 else {"code": code, "message": doc.get("message")}
    return (kind == "application/json" and length == str(len(data)) and doc == expected
            and data == json.dumps(expected, separators=(",", ":")).encode() + b"\n"
            and (code == 200 or (isinstance(doc["message"], str) and doc["message"].endswith("."))))


def raw_fixture(name: str) -> bytes:
    with open(os.path.join(FIXTURES, name + ".json"), "rb") as fh:
        return fh.read()


def body(cron_id: int, name: str = "callback_running", **changes) -> bytes:
    return json.dumps(fixture_body(name, **{"ids": [str(cron_id)], **changes})).encode()


def bad_bodies(cron_id: int) -> list:
    """Every refused body the Legacy and bad-input tests enumerate."""
    good = str(cron_id)
    refused = {
        "ids": [None, [], good, int(good), True, {"0": good}, [-1], ["-1"], [0], ["0"], [1.0],
                [1.5], ["12a"], [" 1"], [""], [None], [True], [[1]], [good, "x"],
                [int(good), 2**63], ["١"]],
        "status": [None, "", "idle", 4, "4", -1, True, False, 1.0, "01", [1], {"s": 1}],
        "pid": [-1, "-1", 1.5, 4242.0, True, "abc", "12 ", [1], {"p": 1}, "٣", 2**63],
        "log_path": ["x" * 1025, 123, True, ["a.log"], {"p": "a"}, "a\x00b.log", "\ud800.log"],
        "last_execution_time": [-1, "1764489600", 1.5, 1764489600.0, True, [1], 2**63, "soon"],
        "last_running_time": [-1, "7", 7.0, True, {"s": 7}],
        "exit_code": [1.5, 0.0, "0", True, [0], 2**31, -(2**31) - 1],
    }
    out = []
    for key, values in refused.items():
        for value in values:
            doc = fixture_body("callback_idle", ids=[good], pid="555", log_path="backup/other.log")
            doc[key] = value
            out.append(json.dumps(doc).encode())
        if key in ("ids", "status"):  # the two required fields, absent
            doc = fixture_body("callback_idle", ids=[good])
            del doc[key]
            out.append(json.dumps(doc).encode())
    small = body(cron_id, "callback_idle", pid="555")
    out += [b"[]", b'["12"]', b'"x"', b"1", b"null", b"true", b"", b"{", small[:-1],
            b"ids=12&status=1", small.replace(b'"555"', b'"5\xff5"'),
            small.replace(b"}", b',"x":NaN}'), small.replace(b"}", b',"x":Infinity}'),
            small.replace(b"}", b',"x":-Infinity}'), b"\xef\xbb\xbf" + small[:5],
            small.replace(b"}", b',"deep":' + b"[" * 30000 + b"]" * 30000 + b"}"),
            b'\xff\xfe{"ids":[1],"status":0}', b'{"ids":[1],"status":0,"log_path":"\xc3\x28"}',
            b'{"ids":[1],"status":0,"log_path":"\xed\xa0\x80"}',
            b'{"ids":[1],"status":0,"unknown":"\x80"}',
            b'{"ids":[1],"status":0,"log_path":"a\\u0000b"}',
            b'{"ids":[1],"status":0,"log_path":"\\ud800"}']
    return out


def test_every_fixture_and_success_is_answered_200(both, auth, make_cron):
    for n in range(12):
        make_cron(name=f"job{n + 1}")
    json_type = {**auth, "Content-Type": "application/json"}
    cases = [
        (raw_fixture("callback_running"), auth, "PUT"),
        (raw_fixture("callback_idle"), auth, "PUT"),
        (raw_fixture("callback_running"), auth, "POST"),
        (body(3), {**auth, "Content-Type": "application/x-www-form-urlencoded"}, "PUT"),
        (body(4, future_field={"strict": [1]}, retries=-1), json_type, "PUT"),
        (body(5, execution_id=EXECUTION_ID), json_type, "PUT"),
        (body(5, "callback_idle", execution_id=EXECUTION_ID), json_type, "PUT"),
        (body(6, execution_id="LEGACY-SYSTEM:1:x"), json_type, "PUT"),
        (body(7, execution_id=""), json_type, "PUT"),
        (body(7, ids=["7", "8"], execution_id=EXECUTION_ID), json_type, "PUT"),
        (body(999, execution_id=EXECUTION_ID), json_type, "PUT"),
        (body(9, status="2"), json_type, "PUT"),
        (body(9, "callback_idle", pid="''", log_path=""), json_type, "POST"),
    ]
    for raw, headers, method in cases:
        answer = both(raw, headers, method)
        assert answer[0] == "200 OK"


def test_every_refused_body_is_a_400_or_413(both, auth, make_cron):
    cron = make_cron()
    for raw in bad_bodies(cron["id"]):
        answer = both(raw, auth)
        assert answer[0] in ("400 BAD REQUEST", "413 REQUEST ENTITY TOO LARGE"), raw[:200]


def test_the_body_limit_holds_to_the_byte(both, auth, make_cron, app):
    cron = make_cron()
    limit = app.extensions["qlshadow"].max_body
    doc = body(cron["id"])
    exact = doc[:-1] + b',"padding":"' + b"x" * (limit - len(doc) - 13) + b'"}'
    over = exact[:-2] + b'xx"}'
    assert (len(exact), len(over)) == (limit, limit + 2)
    for raw, status in ((exact, "200 OK"), (over, "413 REQUEST ENTITY TOO LARGE")):
        answer = both(raw, auth)
        assert answer[0] == status
    # A chunked body over the limit goes through waitress's de-chunking: tests/test_errors.py
    # plays it against `qlshadow serve`.


def test_every_auth_refusal_is_a_401_or_403(both, auth, make_cron, client):
    cron = make_cron()
    raw = body(cron["id"])
    with db.database.connection_context(), db.write_transaction():
        client_id, secret = create_app_record("reader", ["runs"])
    reader = client.get("/open/auth/token", query_string={
        "client_id": client_id, "client_secret": secret}).get_json()["data"]["token"]
    cases = [{}, {"Authorization": "Basic dXNlcjpwdw=="}, {"Authorization": "Bearer "},
             {"Authorization": "Bearer nope"}, {"Authorization": f"Bearer {reader}"},
             {"Authorization": "bearer " + auth["Authorization"][7:]}]
    assert {both(raw, h)[0] for h in cases} == {"401 UNAUTHORIZED", "403 FORBIDDEN", "200 OK"}


def test_an_expired_token_is_refused_once_it_is_looked_up_again(both, auth, make_cron, monkeypatch):
    cron = make_cron()
    raw = body(cron["id"])
    assert both(raw, auth)[0] == "200 OK"
    with db.database.connection_context():
        Token.update(expiration=int(time.time()) - 1).execute()
    later = time.time() + 61  # past the minute a looked-up token is trusted
    monkeypatch.setattr(time, "time", lambda: later)

    answer = both(raw, auth)

    assert answer[0] == "401 UNAUTHORIZED"


def test_other_spellings_and_methods_are_refused_as_json(both, auth):
    for method, path in (("PUT", "/OPEN/crons/status"), ("PUT", "/open/Crons/status"),
                         ("GET", PATH), ("PUT", PATH + "/"), ("DELETE", PATH)):
        answer = both(b"{}", auth, method, path)
        assert answer[0][:3] in ("400", "404", "405"), (method, path)


def test_a_database_refusal_is_a_409_and_writes_nothing(both, auth, make_cron, backend):
    first, second = make_cron(name="a"), make_cron(name="b")
    _fail_updates_of(backend, second["id"])
    before = legacy_rows()

    answer = both(body(first["id"], ids=[str(first["id"]), str(second["id"])]), auth)

    assert answer[0] == "409 CONFLICT"
    assert legacy_rows() == before


def test_the_database_down_is_a_503(both, auth, make_cron, backend, db_url):
    cron = make_cron()
    _take_database_down(backend, db_url)

    answer = both(body(cron["id"]), auth)

    assert answer[0] == "503 SERVICE UNAVAILABLE"


def test_an_auth_refusal_reads_the_same_on_the_callback_and_on_other_routes(both, client):
    for headers in ({}, {"Authorization": "Bearer nope"}):
        other = client.get("/open/crons", headers=headers)
        assert both(b"{}", headers)[3] == other.get_data()


def test_the_route_answers_without_flask_request_machinery(app, auth, make_cron):
    """The adapter sits in front of Flask: no before_request hook runs for a callback."""
    cron, seen = make_cron(), []
    app.before_request_funcs.setdefault(None, []).insert(0, lambda: seen.append(1))
    client = app.test_client()
    assert client.put(PATH, data=body(cron["id"]), headers=auth).status_code == 200
    assert seen == []
    assert client.get("/open/crons", headers=auth).status_code == 200
    assert seen == [1]
