"""Ids in paths follow the one integer rule (app/parse.py): ASCII digits only. A fullwidth or
Arabic-Indic digit names no cron and no instance: the path is a 404, as any id that is not
a number, on the API and on the page (both databases)."""
from __future__ import annotations

import os
from urllib.parse import quote

import pytest

from qlshadow.storage import db
from qlshadow.core.auth import create_app_record
from helpers import STATUS_PATH

FULLWIDTH_1 = "\uff11"
NOT_ASCII = [FULLWIDTH_1, "\u0661", "1" + FULLWIDTH_1]


@pytest.fixture
def cron_with_instance(client, auth, make_cron, settings) -> int:
    """Cron 1 with its instance 1, whose log exists."""
    os.makedirs(os.path.join(settings.log_dir, "a"))
    with open(os.path.join(settings.log_dir, "a", "1.log"), "w") as fh:
        fh.write("hello\n")
    cron = make_cron()
    assert cron["id"] == 1
    body = {"ids": [1], "status": 0, "pid": 7, "log_path": "a/1.log"}
    assert client.put(STATUS_PATH, json=body, headers=auth).status_code == 200
    return cron["id"]


API_PATHS = ["/open/crons/{}", "/open/crons/{}/instances", "/open/crons/1/instances/{}/log",
             "/open/crons/{}/instances/1/log"]


@pytest.mark.parametrize("path", API_PATHS)
@pytest.mark.parametrize("digit", NOT_ASCII)
def test_a_non_ascii_digit_in_an_api_path_is_a_404(client, auth, cron_with_instance, path,
                                                  digit):
    response = client.get(path.format(quote(digit)), headers=auth)
    assert (response.status_code, response.get_json()["code"]) == (404, 404)


@pytest.mark.parametrize("path", API_PATHS)
def test_the_same_path_with_ascii_digits_still_answers(client, auth, cron_with_instance, path):
    assert client.get(path.format(1), headers=auth).status_code == 200


def test_a_non_ascii_digit_in_a_query_is_a_400_as_before(client, auth, cron_with_instance):
    response = client.get(f"/open/crons/1/instances?limit={quote(FULLWIDTH_1)}", headers=auth)
    assert response.status_code == 400


@pytest.mark.parametrize("digit", NOT_ASCII)
def test_a_non_ascii_digit_in_a_page_path_is_a_404(app, client, cron_with_instance, digit):
    with db.database.connection_context(), db.write_transaction():
        viewer = create_app_record("viewer", ["crons", "runs"])
    client.post("/page/login", data={"client_id": viewer[0], "client_secret": viewer[1]},
                headers={"Origin": "http://localhost"})
    assert client.get("/page/crons/1").status_code == 200
    assert client.get(f"/page/crons/{quote(digit)}").status_code == 404
