"""Routers boot with wrong clocks: execution ids far in the past or future are recorded
as sent (accepted_at is the id's seconds) and never refused for being far from now."""
from __future__ import annotations

import pytest

from invariants import Inspector

from .helpers import Execution

pytestmark = [pytest.mark.shadow_on, pytest.mark.faults]

SKEWED = {
    "epoch_second_1": 1,
    "year_2001": 978_307_200,
    "year_2090": 3_786_912_000,
    "largest_allowed": 4_294_967_295,
}


@pytest.mark.parametrize("seconds", SKEWED.values(), ids=SKEWED.keys())
def test_a_far_off_start_time_is_recorded_faithfully(client, auth, make_cron, db_url, seconds):
    cron_id = make_cron()["id"]
    execution = Execution(cron_id, seconds, 4242, "skew.log", 0)
    for kind in ("running", "idle"):
        response = client.put("/open/crons/status", json=execution.body(kind), headers=auth)
        assert response.status_code == 200
    runs = client.get(f"/open/runs?cron_id={cron_id}", headers=auth).get_json()["data"]
    assert [(r["idempotency_key"], r["accepted_at"], r["scheduled_at"], r["state"])
            for r in runs] == [(execution.eid, seconds, seconds, "exited")]
    shown = client.get(f"/open/runs/{runs[0]['id']}", headers=auth).get_json()["data"]
    assert shown["accepted_at"] == seconds
    assert client.get("/open/runs/failures", headers=auth).get_json()["data"] == []
    with Inspector(db_url) as inspector:
        inspector.check(runs_exactly={execution.eid}, open_instances=False)


def test_a_run_with_a_past_start_and_one_with_a_future_start_list_in_start_order(
        client, auth, make_cron, db_url):
    cron_id = make_cron()["id"]
    past = Execution(cron_id, SKEWED["year_2001"], 1, "a.log", 0)
    future = Execution(cron_id, SKEWED["year_2090"], 2, "b.log", 0)
    for execution in (future, past):
        assert client.put("/open/crons/status", json=execution.body("idle"),
                          headers=auth).status_code == 200
    runs = client.get("/open/runs", headers=auth).get_json()["data"]
    assert [r["accepted_at"] for r in runs] == [SKEWED["year_2090"], SKEWED["year_2001"]]
    with Inspector(db_url) as inspector:
        inspector.check(runs_exactly={past.eid, future.eid})
