"""Each page needs the scope its API needs (docs/CONTRACT.md §2.2, §9): an app with only
`crons` sees the crons, their health and the alert log, but no Run, no task log, no
execution, no accept failure and no gate, signed in by secret or by token (both databases)."""
from __future__ import annotations

import os
import time
from html import unescape

import pytest

from qlshadow.storage import db
from qlshadow.core.auth import create_app_record, issue_token
from qlshadow.storage.models import App
from helpers import STATUS_PATH

pytestmark = pytest.mark.shadow_on

LOG_TEXT = "the-secret-log-line"


@pytest.fixture
def ran(app, client, auth, make_cron) -> dict:
    """A cron with one finished scheduled execution (a Run) whose log holds LOG_TEXT."""
    cron = make_cron(name="report", schedule="0 0 1 1 *")["id"]
    log_dir = app.extensions["qlshadow"].log_dir
    os.makedirs(os.path.join(log_dir, "report"))
    with open(os.path.join(log_dir, "report", "a.log"), "w") as fh:
        fh.write(LOG_TEXT + "\n")
    at = int(time.time()) - 60
    eid = f"legacy-system:{at}:0000002a-9d4a-4e6b-8f1a-2c3d4e5f6a7b"
    for body in ({"status": 0, "pid": 42}, {"status": 1, "pid": 42, "exit_code": 0,
                                            "last_running_time": 1}):
        body = {**body, "ids": [cron], "last_execution_time": at, "execution_id": eid,
                "log_path": "report/a.log"}
        assert client.put(STATUS_PATH, json=body, headers=auth).status_code == 200
    run = client.get(f"/open/runs?cron_id={cron}", headers=auth).get_json()["data"][0]
    return {"cron": cron, "run": run["id"]}


def _signed_in(client, scopes: list, by_token: bool):
    with db.database.connection_context(), db.write_transaction():
        client_id, secret = create_app_record("viewer", scopes)
        token, _ = issue_token(App.get(App.name == "viewer").id, int(time.time()))
    form = {"token": token} if by_token else {"client_id": client_id, "client_secret": secret}
    assert client.post("/page/login", data=form).status_code == 303
    return client


@pytest.mark.parametrize("by_token", [False, True], ids=["secret", "token"])
def test_an_app_with_only_crons_gets_a_403_sentence_for_a_run_and_the_gate(client, ran,
                                                                          by_token):
    page = _signed_in(client, ["crons"], by_token)
    for path in (f"/page/runs/{ran['run']}", "/page/gate"):
        response = page.get(path)
        html = unescape(response.get_data(as_text=True))
        assert response.status_code == 403, path
        assert "need the 'runs' scope, which the app viewer does not have." in html
        # The footer's language link repeats the address asked for; the page shows nothing.
        assert LOG_TEXT not in html
        assert ran["run"] not in html.split("<main>")[-1].split("</main>")[0]


@pytest.mark.parametrize("by_token", [False, True], ids=["secret", "token"])
def test_an_app_with_only_crons_sees_a_cron_without_its_executions_or_log(client, ran,
                                                                         by_token):
    page = _signed_in(client, ["crons"], by_token)
    response = page.get(f"/page/crons/{ran['cron']}")
    html = unescape(response.get_data(as_text=True))
    assert response.status_code == 200 and "<h1>report" in html
    assert "Executions, their logs and accept failures need the 'runs' scope" in html
    assert LOG_TEXT not in html and ran["run"] not in html


def test_an_app_with_only_crons_still_sees_the_list_and_the_health_page(client, ran):
    page = _signed_in(client, ["crons"], False)
    assert page.get("/page/").status_code == 200
    assert page.get("/page/health").status_code == 200


def test_an_app_with_crons_and_runs_sees_runs_logs_and_the_gate(client, ran):
    page = _signed_in(client, ["crons", "runs"], False)
    run_page = page.get(f"/page/runs/{ran['run']}")
    cron_page = page.get(f"/page/crons/{ran['cron']}")
    assert run_page.status_code == 200 and LOG_TEXT in run_page.get_data(as_text=True)
    assert cron_page.status_code == 200 and LOG_TEXT in cron_page.get_data(as_text=True)
    assert page.get("/page/gate").status_code == 200


def test_the_api_refuses_the_same_reads_to_the_same_app(client, ran):
    with db.database.connection_context(), db.write_transaction():
        create_app_record("viewer", ["crons"])
        token, _ = issue_token(App.get(App.name == "viewer").id, int(time.time()))
    headers = {"Authorization": f"Bearer {token}"}
    for path in (f"/open/runs/{ran['run']}", f"/open/runs/{ran['run']}/log", "/open/reconcile"):
        assert client.get(path, headers=headers).status_code == 403, path
