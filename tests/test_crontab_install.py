"""What a cron may hold, the install state in /health, the runner's token and files."""
from __future__ import annotations

import json
import os
import stat

import pytest

from qlshadow.host import crontab
from qlshadow.storage import db
from helpers import cli_env, run_cli

MARKER = "QL_EXECUTION_ORIGIN=scheduled_system"


@pytest.fixture
def shadow_env() -> dict:
    return {"QL_SCHEDULER": "system"}


def read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def cron_count(client, auth) -> int:
    return client.get("/open/crons", headers=auth).get_json()["data"]["total"]


# --- refused at the API ---------------------------------------------------------------------

def test_a_command_too_long_for_debian_cron_is_refused_naming_the_field(client, auth, make_cron):
    make_cron(name="kept")
    response = client.post("/open/crons", json={"name": "long", "schedule": "* * * * *",
                                                "command": "echo " + "x" * 990}, headers=auth)
    assert response.status_code == 400
    message = response.get_json()["message"]
    assert message.startswith("'command'") and "998" in message
    assert cron_count(client, auth) == 1


def test_percent_signs_count_five_bytes_each_toward_the_limit(client, auth):
    response = client.post("/open/crons", json={"name": "p", "schedule": "* * * * *",
                                                "command": "echo " + "%" * 190}, headers=auth)
    assert response.status_code == 400
    assert "'command'" in response.get_json()["message"]


def test_a_long_task_before_is_refused_naming_it(client, auth):
    response = client.post("/open/crons", json={"name": "h", "schedule": "* * * * *",
                                                "command": "true",
                                                "task_before": "#" * 300}, headers=auth)
    assert response.status_code == 400
    assert response.get_json()["message"].startswith("'task_before'")


def test_an_update_that_makes_the_line_too_long_is_refused_and_changes_nothing(
        client, auth, make_cron, settings):
    cron = make_cron(command="echo short")
    before = read(settings.crontab_file)
    response = client.put("/open/crons", json={"id": cron["id"], "command": "echo " + "y" * 995},
                          headers=auth)
    assert response.status_code == 400
    assert client.get(f"/open/crons/{cron['id']}", headers=auth).get_json()["data"]["command"] == "echo short"
    assert read(settings.crontab_file) == before


def test_an_ambiguous_step_is_refused_with_the_two_meanings(client, auth):
    response = client.post("/open/crons", json={"name": "s", "schedule": "5/10 * * * *",
                                                "command": "true"}, headers=auth)
    assert response.status_code == 400
    assert "5-59/10" in response.get_json()["message"]
    assert cron_count(client, auth) == 0


# --- install state ----------------------------------------------------------------------------

def test_a_failed_install_makes_health_not_ok_until_an_install_succeeds(
        client, auth, app, make_settings):
    app.extensions["qlshadow"] = make_settings(QL_SCHEDULER="system", QL_CRONTAB_INSTALL="false {file}",
                                               QL_CRONTAB_LIST="")
    assert client.post("/open/crons", json={"name": "a", "command": "true", "schedule": "* * * * *"},
                       headers=auth).status_code == 503
    health = client.get("/health")
    state = health.get_json()["data"]["crontab"]
    assert health.status_code == 503 and health.get_json()["data"]["status"] == "error"
    assert state.startswith("not installed: installing the crontab failed: false ")
    assert health.get_json()["message"] == f"The crontab is {state}."
    app.extensions["qlshadow"] = make_settings(QL_SCHEDULER="system", QL_CRONTAB_INSTALL="true {file}",
                                               QL_CRONTAB_LIST="")
    assert client.post("/open/crons", json={"name": "b", "command": "true", "schedule": "* * * * *"},
                       headers=auth).status_code == 200
    health = client.get("/health")
    assert health.status_code == 200 and health.get_json()["data"]["crontab"].startswith("installed")


def test_qlshadow_crontab_says_why_the_crontab_is_not_installed(settings, make_cron):
    make_cron()  # an active line: there is something to install
    env = dict(cli_env(settings), QL_SCHEDULER="system", QL_CRONTAB_INSTALL="false {file}",
               QL_CRONTAB_LIST="")
    result = run_cli(env, "crontab", check=False)
    assert result.returncode == 1
    assert result.stderr.startswith("qlshadow: crontab not installed: installing the crontab failed")


# --- secrets and the runner -------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["postgres"])
def test_a_database_password_from_the_environment_is_never_on_a_crontab_line(
        make_settings, make_cron, tmp_path):
    settings = make_settings(QL_SCHEDULER="system")
    url = settings.db_url.replace("postgres@", "postgres:pw%25s3cr3t@")
    import dataclasses
    settings = dataclasses.replace(settings, db_url=url)
    make_cron(command="echo hi")
    with db.database.connection_context():
        text = crontab.render(settings)
        crontab.prepare_runner(settings)
    assert "s3cr3t" not in text and "QL_DB_URL" not in text
    conf = os.path.join(settings.data_dir, "runner.conf")
    assert f'QL_DB_URL="{url}"' in read(conf)
    assert stat.S_IMODE(os.stat(conf).st_mode) == 0o600


def test_the_runner_files_and_data_dir_are_private(settings, make_cron):
    make_cron()
    data = settings.data_dir
    assert stat.S_IMODE(os.stat(data).st_mode) == 0o700
    for name in ("runner.conf", "runner.env", "runner-token.json", "crontab.list"):
        assert stat.S_IMODE(os.stat(os.path.join(data, name)).st_mode) == 0o600, name


def test_the_runner_token_posts_callbacks_and_nothing_else(client, settings, make_cron):
    cron = make_cron()
    token = json.loads(read(os.path.join(settings.data_dir, "runner-token.json")))["value"]
    headers = {"Authorization": f"Bearer {token}"}
    callback = {"ids": [cron["id"]], "status": 0, "pid": 1, "log_path": "x.log"}
    assert client.put("/open/crons/status", json=callback, headers=headers).status_code == 200
    assert client.post("/open/crons/status", json=callback, headers=headers).status_code == 200
    assert client.get("/open/crons", headers=headers).status_code == 403
    assert client.get("/open/runs", headers=headers).status_code == 403
    assert client.put("/open/crons/run", json=[cron["id"]], headers=headers).status_code == 403


def test_token_system_keeps_every_scope_and_its_file(settings):
    result = run_cli(cli_env(settings), "token", "system")
    assert result.stdout.strip() == os.path.join(settings.data_dir, "token.json")
    from qlshadow.core.auth import token_scopes
    value = json.loads(read(os.path.join(settings.data_dir, "token.json")))["value"]
    with db.database.connection_context():
        assert token_scopes(value, 0)[0] == frozenset({"crons", "runs"})


def test_token_runner_writes_a_callback_only_token(settings):
    result = run_cli(cli_env(settings), "token", "runner")
    path = result.stdout.strip()
    assert path == os.path.join(settings.data_dir, "runner-token.json")
    from qlshadow.core.auth import token_scopes
    with db.database.connection_context():
        assert token_scopes(json.loads(read(path))["value"], 0)[0] == frozenset({"status"})
