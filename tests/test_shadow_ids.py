"""execution_id parsing (CONTRACT.md §3.2); deterministic ids and task revision (§3.6, with its
known values)."""
from __future__ import annotations

import hashlib

import pytest

from qlshadow.core.shadow.ids import (attempt_id, parse_execution_id, revision_doc, run_id,
                                      task_revision)
from helpers import SHADOW_ON

VECTOR_ID = "legacy-system:1764460800:3f2b8c1e-9d4a-4e6b-8f1a-2c3d4e5f6a7b"
VECTOR_RUN = "019ad20f-2800-7b96-9e03-1ff0f2a0435b"
VECTOR_ATTEMPT = "019ad20f-2800-710a-80b0-4803e8247736"
ONE_ID = "legacy-system:1:00000000-0000-4000-8000-000000000000"
ONE_RUN = "00000000-03e8-7427-93c0-16493082c25d"
VECTOR_REVISION = "a99e6d54ea1f387e8640c8861ac48f9ab4f12934e484f5e37f335e72d9898302"
UUID = "3f2b8c1e-9d4a-4e6b-8f1a-2c3d4e5f6a7b"

INVALID = [
    pytest.param(f"legacy-system:1764460800:{UUID.upper()}", id="uppercase"),
    pytest.param("legacy-system:1764460800:3f2b8c1e-9d4a-1e6b-8f1a-2c3d4e5f6a7b", id="uuid-v1"),
    pytest.param("legacy-system:1764460800:3f2b8c1e-9d4a-4e6b-cf1a-2c3d4e5f6a7b", id="bad-variant"),
    pytest.param(f"legacy-system:1764460800:{{{UUID}}}", id="braces"),
    pytest.param(f"legacy-system:1764460800: {UUID}", id="inner-space"),
    pytest.param(f" legacy-system:1764460800:{UUID}", id="leading-space"),
    pytest.param(f"legacy-system:1764460800:{UUID}\n", id="trailing-newline"),
    pytest.param(f"legacy-system:1764460800:{UUID}:extra", id="extra-part"),
    pytest.param(f"legacy-system:1764460800:1:{UUID}", id="extra-middle-part"),
    pytest.param("legacy-system:1764460800", id="missing-uuid"),
    pytest.param(f"legacy-node:1764460800:{UUID}", id="other-prefix"),
    pytest.param(f"legacy-system:0:{UUID}", id="zero-seconds"),
    pytest.param(f"legacy-system:01:{UUID}", id="leading-zero-seconds"),
    pytest.param(f"legacy-system:-1:{UUID}", id="negative-seconds"),
    pytest.param(f"legacy-system:+1:{UUID}", id="signed-seconds"),
    pytest.param(f"legacy-system:281474976711:{UUID}", id="seconds-over-48-bit-ms"),
    pytest.param(f"legacy-system:1000000000000:{UUID}", id="thirteen-digit-seconds"),
    pytest.param(f"legacy-system:١٧٦٤٤٦٠٨٠٠:{UUID}", id="non-ascii-digits"),
    pytest.param("", id="empty-string"),
    pytest.param(1764460800, id="int"),
    pytest.param([VECTOR_ID], id="list"),
    pytest.param({"id": VECTOR_ID}, id="object"),
    pytest.param(True, id="bool"),
    pytest.param(1.5, id="float"),
]


def test_it_parses_a_valid_execution_id_to_its_start_seconds():
    assert parse_execution_id(VECTOR_ID) == 1764460800


def test_it_accepts_the_smallest_and_the_largest_seconds():
    assert parse_execution_id(ONE_ID) == 1
    assert parse_execution_id(f"legacy-system:4294967295:{UUID}") == 4294967295


@pytest.mark.parametrize("seconds", [4294967296, 281474976710, 999999999999])
def test_it_rejects_seconds_past_the_apis_time_range(seconds):
    assert parse_execution_id(f"legacy-system:{seconds}:{UUID}") is None


@pytest.mark.parametrize("value", INVALID)
def test_it_rejects_an_invalid_execution_id(value):
    assert parse_execution_id(value) is None


def test_the_run_id_matches_the_spec_vector():
    assert run_id(VECTOR_ID, 1764460800) == VECTOR_RUN


def test_the_attempt_id_matches_the_spec_vector():
    assert attempt_id(VECTOR_ID, 1764460800) == VECTOR_ATTEMPT


def test_the_run_id_of_second_one_matches_the_spec_vector():
    assert run_id(ONE_ID, 1) == ONE_RUN


def test_an_id_does_not_depend_on_the_ids_made_before_it():
    # The fixed part of the hashed text is hashed once and copied for each id.
    for _ in range(3):
        run_id(ONE_ID, 1)
        attempt_id(VECTOR_ID, 1764460800)
    assert run_id(VECTOR_ID, 1764460800) == VECTOR_RUN
    assert attempt_id(VECTOR_ID, 1764460800) == VECTOR_ATTEMPT


@pytest.mark.parametrize("project_id", ["default", "other", "prój"])
def test_an_id_carries_the_sha256_of_its_whole_text_for_any_project(project_id):
    key = "légacy ✓ not an execution id"
    for kind, make in (("run", run_id), ("attempt:1", attempt_id)):
        digest = hashlib.sha256(f"{kind}|{project_id}|{key}|7000".encode()).digest()
        made = bytes.fromhex(make(key, 7, project_id).replace("-", ""))
        assert made[:6] == (7000).to_bytes(6, "big")
        assert made[6:] == bytes((0x70 | (digest[0] & 0x0F), digest[1],
                                  0x80 | (digest[2] & 0x3F))) + digest[3:10]


def test_the_task_revision_matches_the_spec_vector():
    doc = revision_doc("backup", "task backup.sh", "*/5 * * * *")
    assert task_revision(doc) == VECTOR_REVISION


def test_the_task_revision_changes_with_every_covered_field():
    base = revision_doc("backup", "task backup.sh", "*/5 * * * *")
    variants = [dict(base, **{key: value}) for key, value in (
        ("name", "b"), ("command", "c"), ("schedule", "* * * * *"),
        ("extra_schedules", [{"schedule": "1 * * * *"}]), ("task_before", "x"),
        ("task_after", "y"), ("work_dir", "/tmp"), ("log_name", "z"),
        ("allow_multiple_instances", 1))]
    digests = {task_revision(doc) for doc in [base, *variants]}
    assert len(digests) == len(variants) + 1


@pytest.mark.parametrize("shadow_env", [SHADOW_ON])
@pytest.mark.parametrize("execution_id, seconds, expected_run", [
    (VECTOR_ID, 1764460800, VECTOR_RUN), (ONE_ID, 1, ONE_RUN)])
def test_a_run_admitted_over_http_carries_the_vector_ids_and_revision(
        client, auth, make_cron, execution_id, seconds, expected_run):
    cron = make_cron(name="backup", command="task backup.sh", schedule="*/5 * * * *")
    body = {"ids": [cron["id"]], "status": 1, "pid": 7, "last_execution_time": seconds,
            "exit_code": 0, "execution_id": execution_id}
    assert client.put("/open/crons/status", json=body, headers=auth).status_code == 200
    runs = client.get("/open/runs", headers=auth).get_json()["data"]
    assert [(r["id"], r["task_revision"], r["accepted_at"], r["scheduled_at"]) for r in runs] == [
        (expected_run, VECTOR_REVISION, seconds, seconds)]
    if execution_id == VECTOR_ID:
        assert runs[0]["attempt"]["id"] == VECTOR_ATTEMPT
