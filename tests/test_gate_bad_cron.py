"""One cron's bad data (a schedule stored before today's checks) never makes the gate answer
500: that cron gets its own "cannot evaluate" verdict in GET /open/reconcile, /page/gate and
`qlshadow reconcile`, and the other crons are judged as usual (both databases)."""
from __future__ import annotations

import json
import time

import pytest

from qlshadow.storage import db
from qlshadow.core.auth import create_app_record
from qlshadow.storage.models import Cron
from helpers import cli_env, run_cli
from reconcile_history import HOUR, history, new_cron

NEVER = "0 0 30 2 *"  # refused at the API today; stored by older versions


# Histories below are laid out in UTC minutes (a test may set its own zone inside).
pytestmark = [pytest.mark.shadow_on, pytest.mark.usefixtures("utc_box")]


@pytest.fixture
def crons(client, auth):
    """(good cron id, bad cron id, window query): a judged cron with a clean history, and
    one whose schedule was written to the database directly."""
    until = int(time.time()) // HOUR * HOUR - HOUR
    since = until - 6 * HOUR
    good = new_cron(client, auth, "*/30 * * * *", since - HOUR, name="good")
    history(client, auth, good, range(since, until, 1800))
    bad = new_cron(client, auth, "0 0 * * *", since - HOUR, name="bad")
    with db.connected(), db.write_transaction():
        Cron.update(schedule=NEVER).where(Cron.id == bad).execute()
    return good, bad, f"since={since}&until={until}"


def _verdicts(data: dict) -> dict:
    return {c["cron_id"]: (c["verdict"], c["reasons"]) for c in data["crons"]}


def test_the_api_gives_the_bad_cron_its_own_verdict(client, auth, crons):
    good, bad, window = crons
    response = client.get(f"/open/reconcile?{window}", headers=auth)
    assert response.status_code == 200, response.get_json()
    verdicts = _verdicts(response.get_json()["data"])
    assert verdicts[good][0] == "pass"
    verdict, reasons = verdicts[bad]
    assert verdict == "insufficient"
    assert len(reasons) == 1 and reasons[0].startswith("cannot evaluate: ")


def test_the_api_with_only_the_bad_cron_answers_its_verdict(client, auth, crons):
    _, bad, window = crons
    response = client.get(f"/open/reconcile?cron_id={bad}&{window}", headers=auth)
    assert response.status_code == 200, response.get_json()
    data = response.get_json()["data"]
    assert data["gate"]["verdict"] == "insufficient"
    assert any("cannot evaluate" in reason for reason in data["gate"]["reasons"])


def test_the_gate_page_shows_the_bad_cron(app, client, crons):
    with db.database.connection_context(), db.write_transaction():
        viewer = create_app_record("viewer", ["crons", "runs"])
    client.post("/page/login", data={"client_id": viewer[0], "client_secret": viewer[1]},
                headers={"Origin": "http://localhost"})
    response = client.get("/page/gate")
    assert response.status_code == 200
    assert "cannot evaluate" in response.get_data(as_text=True)


def test_the_cli_reports_the_bad_cron_and_exits_with_the_gate_verdict(settings, crons):
    good, bad, window = crons
    since, until = (part.split("=")[1] for part in window.split("&"))
    result = run_cli(cli_env(settings), "reconcile", "--json", "--since", since, "--until",
                     until, check=False)
    assert "Traceback" not in result.stderr
    assert result.returncode == 0, result.stderr  # the good cron passes
    verdicts = _verdicts(json.loads(result.stdout)["data"])
    assert verdicts[bad][0] == "insufficient" and "cannot evaluate" in verdicts[bad][1][0]

    table = run_cli(cli_env(settings), "reconcile", "--cron", str(bad), check=False)
    assert table.returncode == 3, table.stderr
    assert "cannot evaluate" in table.stdout and "Traceback" not in table.stderr
