"""Schedules that never fire are refused wherever a schedule comes in: POST, PUT, extra
schedules and `qlshadow cron add` (both databases)."""
from __future__ import annotations

from qlshadow.storage.models import Cron
from helpers import cli_env, run_cli, table_rows

NEVER = "0 0 30 2 *"


def _refused(response) -> str:
    body = response.get_json()
    assert (response.status_code, body["code"]) == (400, 400), body
    assert "day of month" in body["message"], body
    return body["message"]


def test_create_refuses_a_schedule_that_never_fires(client, auth):
    _refused(client.post("/open/crons", json={"name": "n", "command": "true",
                                              "schedule": NEVER}, headers=auth))
    assert table_rows(Cron) == []


def test_update_refuses_a_schedule_that_never_fires(client, auth, make_cron):
    cron = make_cron(schedule="0 0 * * *")
    _refused(client.put("/open/crons", json={"id": cron["id"], "schedule": "0 0 31 6,9,11 *"},
                        headers=auth))
    assert [row["schedule"] for row in table_rows(Cron)] == ["0 0 * * *"]


def test_extra_schedules_refuse_a_schedule_that_never_fires(client, auth):
    message = _refused(client.post("/open/crons", json={
        "name": "n", "command": "true", "schedule": "0 0 * * *",
        "extra_schedules": [{"schedule": "0 0 31 4 *"}]}, headers=auth))
    assert "extra_schedules" in message
    assert table_rows(Cron) == []


def test_cli_cron_add_refuses_a_schedule_that_never_fires(settings):
    result = run_cli(cli_env(settings), "cron", "add", NEVER, "true", check=False)
    assert result.returncode == 1
    assert "day of month" in result.stderr and "Traceback" not in result.stderr
    assert table_rows(Cron) == []
