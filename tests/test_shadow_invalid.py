"""Callbacks Shadow refuses (CONTRACT.md §3.2, §3.3): Legacy still written, a bounded accept
failure."""
from __future__ import annotations

import pytest

from qlshadow.storage.models import ShadowFailure, ShadowRun
from helpers import SHADOW_ON, STATUS_PATH, legacy_rows

UUID = "3f2b8c1e-9d4a-4e6b-8f1a-2c3d4e5f6a7b"
VALID = f"legacy-system:1764460800:{UUID}"
INVALID_STRINGS = [
    f"legacy-system:1764460800:{UUID.upper()}",
    "legacy-system:1764460800:3f2b8c1e-9d4a-1e6b-8f1a-2c3d4e5f6a7b",
    f"legacy-system:1764460800:{{{UUID}}}",
    f"legacy-system:1764460800: {UUID}",
    f"legacy-system:1764460800:{UUID}:x",
    f"legacy-system:0:{UUID}",
    f"legacy-system:01:{UUID}",
    f"legacy-system:281474976711:{UUID}",
    "",
]
INVALID_OTHERS = [1764460800, [VALID], {"id": VALID}, True, False]


def callback(cron_id, execution_id, *, status=1, running_time=7, ids=None):
    body = {"ids": ids or [cron_id], "status": status, "pid": 99, "log_path": "x.log",
            "last_execution_time": 1764460800, "last_running_time": running_time,
            "exit_code": 0, "execution_id": execution_id}
    return body


def send(client, auth, body) -> bytes:
    response = client.put(STATUS_PATH, json=body, headers=auth)
    assert response.status_code == 200
    return response.data


def failures() -> list:
    return [(f["reason"], f["request_id"], f["cron_id"])
            for f in ShadowFailure.select().order_by(ShadowFailure.id).dicts()]


def shadow_row_count() -> int:
    return ShadowRun.select().count()


@pytest.mark.parametrize("shadow_env", [SHADOW_ON])
def test_an_invalid_id_writes_legacy_and_records_a_failure(client, auth, make_cron):
    cron = make_cron()
    values = INVALID_STRINGS + INVALID_OTHERS
    for n, value in enumerate(values, 1):
        assert send(client, auth, callback(cron["id"], value, running_time=n)) == b'{"code":200}\n'
        # Legacy took this very callback: the duration it carried is now the cron's.
        assert legacy_rows()["crons"][0]["last_running_time"] == n
    assert shadow_row_count() == 0
    expected_request_ids = INVALID_STRINGS + [None] * len(INVALID_OTHERS)
    assert failures() == [("invalid_execution_id", rid, cron["id"]) for rid in expected_request_ids]


def test_an_invalid_id_records_nothing_when_shadow_is_off(client, auth, make_cron):
    cron = make_cron()
    for n, value in enumerate(INVALID_STRINGS + INVALID_OTHERS, 1):
        send(client, auth, callback(cron["id"], value, running_time=n))
        assert legacy_rows()["crons"][0]["last_running_time"] == n
    assert (shadow_row_count(), failures()) == (0, [])


@pytest.mark.parametrize("shadow_env", [SHADOW_ON])
def test_several_ids_with_one_execution_id_are_refused_as_multiple_ids(client, auth, make_cron):
    first, second = make_cron(name="a"), make_cron(name="b")
    send(client, auth, callback(None, VALID, ids=[first["id"], second["id"]]))
    assert shadow_row_count() == 0
    assert failures() == [("multiple_ids", VALID, None)]
    assert [c["last_running_time"] for c in legacy_rows()["crons"]] == [7, 7]


@pytest.mark.parametrize("shadow_env", [SHADOW_ON])
def test_an_unknown_cron_is_refused_as_unknown_cron(client, auth, make_cron):
    make_cron()
    send(client, auth, callback(4040, VALID))
    assert shadow_row_count() == 0
    assert failures() == [("unknown_cron", VALID, 4040)]


@pytest.mark.parametrize("shadow_env", [SHADOW_ON])
@pytest.mark.parametrize("status", [2, 3, "2", "3"])
def test_a_status_other_than_running_or_idle_is_refused_as_unsupported_status(
        client, auth, make_cron, status):
    cron = make_cron()
    send(client, auth, callback(cron["id"], VALID, status=status))
    assert shadow_row_count() == 0
    assert failures() == [("unsupported_status", VALID, cron["id"])]
    assert legacy_rows()["crons"][0]["status"] == int(status)  # 2.x wrote it as given


def test_refused_callbacks_leave_no_shadow_rows_when_shadow_is_off(client, auth, make_cron):
    first, second = make_cron(name="a"), make_cron(name="b")
    send(client, auth, callback(None, VALID, ids=[first["id"], second["id"]]))
    send(client, auth, callback(4040, VALID))
    send(client, auth, callback(first["id"], VALID, status=2))
    send(client, auth, callback(first["id"], VALID, status=1))
    assert (shadow_row_count(), failures()) == (0, [])


@pytest.mark.parametrize("shadow_env", [dict(SHADOW_ON, QL3_SHADOW_FAILURE_CAP="3")])
def test_only_the_newest_failures_up_to_the_cap_are_kept(client, auth, make_cron):
    cron = make_cron()
    ids = [f"legacy-system:0{n}:{UUID}" for n in range(1, 6)]
    for value in ids:
        send(client, auth, callback(cron["id"], value))
    assert failures() == [("invalid_execution_id", value, cron["id"]) for value in ids[2:]]


@pytest.mark.parametrize("shadow_env", [SHADOW_ON])
def test_a_huge_invalid_id_is_recorded_truncated(client, auth, make_cron):
    cron = make_cron()
    send(client, auth, callback(cron["id"], "legacy-system:" + "9" * 20000))
    rows = list(ShadowFailure.select().dicts())
    assert [row["reason"] for row in rows] == ["invalid_execution_id"]
    assert len(rows[0]["detail"]) <= 500
    assert rows[0]["request_id"] == ("legacy-system:" + "9" * 20000)[:128]
