"""Property-based fuzzing of callback bodies, headers, paths and methods (hypothesis).

Whatever arrives: never a 5xx, never a traceback or an HTML page, always the JSON error
shape, and a 4xx writes nothing (the whole database is compared before and after).
"""
from __future__ import annotations

import json
import logging
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qlshadow.core.shadow.ids import parse_execution_id
from invariants import Inspector

from .helpers import execution_id

pytestmark = [pytest.mark.shadow_on, pytest.mark.faults]

FUZZ = settings(max_examples=120, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

scalars = (st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=10)
digit_strings = st.from_regex(r"\A[0-9]{1,22}\Z")
TIME_MAX = 2**32 - 1  # the API's latest second (docs/CONTRACT.md §3.1)
near_valid_ids = st.builds(
    lambda s, u, case: (f"legacy-system:{s}:{u}".upper() if case else f"legacy-system:{s}:{u}"),
    st.integers(min_value=-1, max_value=TIME_MAX + 2), st.uuids(), st.booleans())
valid_ids = st.integers(min_value=1, max_value=TIME_MAX).map(execution_id)

storable_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                               blacklist_characters="\x00"), max_size=40)
INT64 = 2**63 - 1
# Values the callback accepts, field by field (cron 1 exists; cron 2 does not).
VALID = {
    "ids": st.sampled_from([[1], ["1"], [1, 2], ["2"], [1, "1"]]),
    "status": st.sampled_from([0, 1, "0", "1", 2, 3]),
    "pid": st.integers(min_value=0, max_value=INT64) | st.from_regex(r"\A[0-9]{1,18}\Z")
    | st.sampled_from(["", "''", None]),
    "log_path": storable_text | st.none(),
    "last_execution_time": st.integers(min_value=0, max_value=TIME_MAX) | st.none(),
    "last_running_time": st.integers(min_value=0, max_value=TIME_MAX) | st.none(),
    "exit_code": st.integers(min_value=-2**31, max_value=2**31 - 1) | st.none(),
    "execution_id": valid_ids | near_valid_ids | st.none(),
}
# Values that are wrong, out of range, or of the wrong type for each field.
BROKEN = {
    "ids": st.lists(st.sampled_from([0, -1, "01x", "x", 2**63, 1.5, True, None, "\u0661"])
                    | json_values, max_size=3) | json_values,
    "status": st.sampled_from([4, -1, "9", "", True, 1.0, None, [0]]) | json_values,
    "pid": st.integers(min_value=-2**70, max_value=-1) | st.integers(min_value=2**63)
    | digit_strings | json_values,
    "log_path": st.text(min_size=1025, max_size=1030) | st.text(max_size=10).map("\x00".__add__)
    | json_values,
    "last_execution_time": st.integers(max_value=-1) | st.integers(min_value=TIME_MAX + 1)
    | json_values,
    "last_running_time": st.integers(max_value=-1) | st.integers(min_value=TIME_MAX + 1)
    | json_values,
    "exit_code": st.integers(min_value=2**31) | st.integers(max_value=-2**31 - 1) | json_values,
    "execution_id": json_values,
}


@st.composite
def callback_bodies(draw) -> dict:
    """A valid callback with a few fields broken, dropped, or joined by unknown keys."""
    body = {"ids": draw(VALID["ids"]), "status": draw(VALID["status"])}
    for name in ("pid", "log_path", "last_execution_time", "last_running_time", "exit_code"):
        if draw(st.booleans()):
            body[name] = draw(VALID[name])
    # Mostly a valid id, so that many examples are admitted and the Run count is checked.
    body["execution_id"] = draw(st.sampled_from(["valid"] * 3 + ["other"]).flatmap(
        lambda kind: valid_ids if kind == "valid" else VALID["execution_id"]))
    # Half the bodies stay valid; the others get one or two fields broken or one removed.
    for name in draw(st.sampled_from([0, 0, 1, 2]).flatmap(
            lambda n: st.sets(st.sampled_from(sorted(BROKEN)), min_size=n, max_size=n))):
        body[name] = draw(BROKEN[name])
    if draw(st.integers(min_value=0, max_value=5)) == 0:
        body.pop(draw(st.sampled_from(["ids", "status", "execution_id"])))
    extra = draw(st.dictionaries(st.text(max_size=12), json_values, max_size=3))
    return {**extra, **body}


token_chars = string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~"
header_names = st.text(alphabet=token_chars, min_size=1, max_size=20).filter(
    lambda name: name.lower() not in ("content-length", "transfer-encoding", "host", "authorization"))
header_values = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF,
                                               blacklist_characters="\x7f"), max_size=60)
ENDPOINTS = ["/open/crons", "/open/crons/1", "/open/crons/status", "/open/crons/1/instances",
             "/open/crons/enable", "/open/crons/disable", "/open/crons/run", "/open/runs",
             "/open/runs/failures", "/open/runs/019ad20f-2800-7b96-9e03-1ff0f2a0435b",
             "/open/auth/token", "/health"]
odd_segments = st.sampled_from(["", ".", "..", "%00", "%ff", "%2e", "%2F", "0", "-1",
                                "99999999999999999999", "OPEN", "Crons"]) \
    | st.text(alphabet=string.ascii_letters + string.digits + "-._~%", max_size=12)


@st.composite
def paths(draw) -> str:
    """A real endpoint, often bent: a segment upper-cased, replaced, added or doubled."""
    parts = draw(st.sampled_from(ENDPOINTS)).split("/")[1:]
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        where = draw(st.integers(min_value=0, max_value=len(parts)))
        action = draw(st.sampled_from(["upper", "replace", "insert", "double"]))
        if action == "insert" or where == len(parts):
            parts.insert(where, draw(odd_segments))
        elif action == "upper":
            parts[where] = parts[where].upper()
        elif action == "replace":
            parts[where] = draw(odd_segments)
        else:
            parts.insert(where, "")
    # A leading empty part would make "//x" (a scheme-relative URL) in the test client itself.
    return "/" + "/".join(parts).lstrip("/")


queries = st.dictionaries(st.sampled_from(["page", "size", "limit", "before", "state", "cron_id",
                                           "client_id", "client_secret", "x"]),
                          st.text(alphabet=string.printable, max_size=12), max_size=3)
methods = st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE",
                           "PROPFIND"]) | st.text(alphabet=string.ascii_uppercase, min_size=1,
                                                  max_size=8)


@pytest.fixture
def admitted() -> set:
    """Execution ids that a 200 answer says must now have their Run."""
    return set()


@pytest.fixture
def inspector(db_url, app, admitted):
    """Snapshots for the examples; the whole-database invariants once the test is over."""
    with Inspector(db_url) as inspector:
        yield inspector
        inspector.check(runs_exactly=admitted)


def admissible_id(body) -> str | None:
    """The execution id of a body answered 200 that Shadow must admit, or None.

    A 200 means the body passed validation, so ids and status hold valid values here.
    """
    if not isinstance(body, dict) or parse_execution_id(body.get("execution_id")) is None:
        return None
    if {int(i) for i in body["ids"]} != {1} or int(body["status"]) not in (0, 1):
        return None  # several ids, an unknown cron, or a status Shadow does not admit
    return body["execution_id"]


@pytest.fixture
def cron(make_cron):
    return make_cron()


@pytest.fixture
def tally(figures, admitted):
    """Counts the examples a fuzz test ran and the statuses they got; reported at the end."""
    seen: dict = {}
    yield seen
    figures(examples=sum(seen.values()), statuses={str(k): v for k, v in sorted(seen.items())},
            runs_expected=len(admitted))


@pytest.fixture
def no_errors_logged(caplog):
    """Fail the test if anything was logged at ERROR (the 500 handler logs tracebacks)."""
    caplog.set_level(logging.WARNING)
    yield
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []


def assert_sound(response, inspector, before, tally: dict, method: str = "PUT") -> None:
    """No 5xx; errors are the JSON shape; a 4xx wrote nothing."""
    tally[response.status_code] = tally.get(response.status_code, 0) + 1
    assert response.status_code < 500, response.data[:300]
    if response.status_code >= 400:
        if method != "HEAD":
            assert response.mimetype == "application/json"
            body = json.loads(response.data)
            assert set(body) == {"code", "message"} and body["code"] == response.status_code
            assert isinstance(body["message"], str) and body["message"].endswith(".")
        assert inspector.snapshot() == before


@FUZZ
@given(body=callback_bodies())
def test_fuzzed_callback_bodies_get_200_or_a_400_that_wrote_nothing(
        client, auth, cron, inspector, no_errors_logged, tally, admitted, body):
    before = inspector.snapshot()
    response = client.put("/open/crons/status", data=json.dumps(body), headers=auth)
    assert response.status_code in (200, 400)
    assert_sound(response, inspector, before, tally)
    if response.status_code == 200 and admissible_id(body):
        admitted.add(body["execution_id"])


@FUZZ
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_fuzzed_raw_bodies_never_fail_the_server(client, auth, cron, inspector,
                                                 no_errors_logged, tally, admitted, raw):
    before = inspector.snapshot()
    response = client.post("/open/crons/status", data=raw, headers=auth)
    assert_sound(response, inspector, before, tally, "POST")
    if response.status_code == 200 and admissible_id(json.loads(raw)):
        admitted.add(json.loads(raw)["execution_id"])


@FUZZ
@given(extra=st.dictionaries(header_names, header_values, max_size=5),
       authorization=st.sampled_from(["token", "token", "lower-scheme", "none"])
       | header_values | header_values.map("Bearer ".__add__))
def test_fuzzed_headers_never_fail_the_server(client, token, cron, inspector, no_errors_logged,
                                              tally, extra, authorization):
    headers = dict(extra)
    if authorization in ("token", "lower-scheme"):
        headers["Authorization"] = ("Bearer " if authorization == "token" else "bearer ") + token
    elif authorization != "none":
        headers["Authorization"] = authorization
    before = inspector.snapshot()
    response = client.put("/open/crons/status", headers=headers,
                          data=json.dumps({"ids": [cron["id"]], "status": 0, "pid": 7}))
    assert_sound(response, inspector, before, tally)
    assert response.status_code in (200, 400, 401)


@FUZZ
@given(method=methods, path=paths(), query=queries, with_token=st.booleans())
def test_fuzzed_paths_and_methods_never_fail_the_server(
        client, auth, cron, inspector, no_errors_logged, tally, method, path, query, with_token):
    before = inspector.snapshot()
    response = client.open(path, method=method, query_string=query,
                           headers=auth if with_token else {})
    assert_sound(response, inspector, before, tally, method)
