"""Hand-picked bad input: invalid UTF-8, NUL and lone surrogates, deeply nested JSON.

Each is a 4xx JSON answer that wrote nothing, or (for an invalid execution_id) the Legacy
update exactly as without an id.
"""
from __future__ import annotations

import pytest

from helpers import ONE_BACKEND
from invariants import Inspector

from .helpers import SHADOW

pytestmark = pytest.mark.faults


@pytest.fixture
def shadow_env():
    return {**SHADOW, "QL_MAX_BODY": "300000"}


@pytest.fixture
def inspector(db_url, app):
    """Snapshots during the test; the whole-database invariants once it is over."""
    with Inspector(db_url) as inspector:
        yield inspector
        inspector.check(runs_exactly=set())


@pytest.fixture
def cron(make_cron):
    return make_cron()


def put(client, auth, raw: bytes):
    return client.put("/open/crons/status", data=raw, headers=auth)


def assert_refused(response, inspector, before, status=400):
    assert response.status_code == status
    assert response.mimetype == "application/json"
    assert response.get_json()["code"] == status
    assert inspector.snapshot() == before


@pytest.mark.parametrize("raw", [
    b'\xff\xfe{"ids":[1],"status":0}',
    b'{"ids":[1],"status":0,"log_path":"\xc3\x28"}',
    b'{"ids":[1],"status":0,"log_path":"\xed\xa0\x80"}',  # a surrogate encoded as UTF-8
    b'{"ids":[1],"status":0,"unknown":"\x80"}',
], ids=["bom-garbage", "bad-continuation", "encoded-surrogate", "bad-byte-in-unknown-key"])
@ONE_BACKEND
def test_invalid_utf8_is_a_400_that_wrote_nothing(client, auth, cron, inspector, raw):
    before = inspector.snapshot()
    assert_refused(put(client, auth, raw), inspector, before)


@pytest.mark.parametrize("escaped", [r"a\u0000b", r"\ud800", r"x\udfffy"],
                         ids=["nul", "lone-high-surrogate", "lone-low-surrogate"])
def test_a_log_path_no_database_can_store_is_a_400_that_wrote_nothing(
        client, auth, cron, inspector, escaped):
    before = inspector.snapshot()
    raw = ('{"ids":[1],"status":0,"pid":5,"log_path":"' + escaped + '"}').encode()
    response = put(client, auth, raw)
    assert_refused(response, inspector, before)
    assert "log_path" in response.get_json()["message"]


@pytest.mark.parametrize("escaped", [r"legacy-system:1:\u0000", r"\ud800"], ids=["nul", "surrogate"])
def test_an_unstorable_execution_id_still_updates_legacy_and_records_a_failure(
        client, auth, cron, inspector, escaped):
    raw = ('{"ids":[1],"status":0,"pid":5,"execution_id":"' + escaped + '"}').encode()
    response = put(client, auth, raw)
    assert response.status_code == 200
    failures = inspector.rows("shadow_failures")
    assert [(f["reason"], f["request_id"]) for f in failures] == [("invalid_execution_id", None)]
    inspector.check(runs_exactly=set(), crons={1: {"status": 0, "pid": 5}})


@pytest.mark.parametrize("field", ["name", "command", "work_dir"])
def test_a_cron_text_no_database_can_store_is_a_400_that_wrote_nothing(
        client, auth, inspector, field):
    before = inspector.snapshot()
    body = {"name": "n", "command": "c", "schedule": "* * * * *", field: "bad\u0000text"}
    response = client.post("/open/crons", json=body, headers=auth)
    assert_refused(response, inspector, before)
    assert field in response.get_json()["message"]


def test_a_client_id_holding_nul_is_refused_as_wrong_credentials(client, inspector):
    before = inspector.snapshot()
    response = client.get("/open/auth/token?client_id=a%00b&client_secret=s")
    assert_refused(response, inspector, before, 401)


@pytest.mark.parametrize("raw", [
    b"[" * 100_000,
    b'{"ids":[1],"status":0,"extra":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"a":' * 40_000 + b"1" + b"}" * 40_000,
], ids=["open-brackets", "closed-under-unknown-key", "nested-objects"])
@ONE_BACKEND
def test_deeply_nested_json_is_a_400_that_wrote_nothing(client, auth, cron, inspector, raw):
    before = inspector.snapshot()
    assert_refused(put(client, auth, raw), inspector, before)
