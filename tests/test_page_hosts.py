"""The status page answers only at the box's own names and addresses (docs/CONTRACT.md §9):
a request naming another host in Host — DNS rebinding, a site whose name was made to
resolve to the router — gets a 421 with one sentence on every page route and no session;
the API, the callback and /health answer under any Host (both databases)."""
from __future__ import annotations

import socket

import pytest

from qlshadow import config
from qlshadow.storage import db
from qlshadow.core.auth import create_app_record
from qlshadow.storage.models import Token
from qlshadow.web.views.page import COOKIE
from helpers import STATUS_PATH

EVIL = "rebind.attacker.example"


@pytest.fixture
def shadow_env() -> dict:
    return {"QL_PAGE_HOSTS": "Router.Example., other.example",
            "QL_BASE_URL": "http://qlshadow.home.arpa:5600"}


@pytest.fixture
def viewer(app) -> tuple:
    with db.database.connection_context(), db.write_transaction():
        return create_app_record("viewer", ["crons", "runs"])


def _page_rules(app) -> list:
    """(method, path) of every route the page owns, ids filled in."""
    found = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint.startswith("page."):
            path = rule.rule.replace("<int:cron_id>", "1").replace("<run_id>", "x")
            found += [(method, path) for method in sorted(rule.methods - {"HEAD", "OPTIONS"})]
    return found


def _sign_in(client, viewer, host: str):
    return client.post("/page/login", data={"client_id": viewer[0], "client_secret": viewer[1]},
                       headers={"Host": host, "Origin": f"http://{host}"})


def _sessions() -> int:
    with db.database.connection_context():
        return Token.select().count()


def test_every_page_route_refuses_another_host_with_one_sentence(app, client, viewer):
    rules = _page_rules(app)
    assert {path for _, path in rules} >= {"/", "/page/", "/page/login", "/page/logout",
                                           "/page/crons/1", "/page/runs/x", "/page/gate",
                                           "/page/health"}
    for method, path in rules:
        response = client.open(path, method=method, headers={"Host": f"{EVIL}:5600"})
        text = response.get_data(as_text=True)
        assert response.status_code == 421, (method, path)
        assert text.endswith(".\n") and text.count("\n") == 1  # one sentence, one line
        assert EVIL in text and "QL_PAGE_HOSTS" in text


def test_a_sign_in_under_another_host_with_a_matching_origin_opens_no_session(client, viewer):
    before = _sessions()
    response = _sign_in(client, viewer, EVIL)
    assert response.status_code == 421
    assert COOKIE not in response.headers.get("Set-Cookie", "")
    assert _sessions() == before


@pytest.mark.parametrize("host", ["localhost", "localhost:5600", "127.0.0.1:5600",
                                  "192.168.1.1", "[::1]:5600", "[fd00::1]",
                                  "router.example", "ROUTER.example.:5600", "other.example",
                                  "qlshadow.home.arpa:5600"])
def test_a_sign_in_at_an_address_or_a_known_name_works(client, viewer, host):
    response = _sign_in(client, viewer, host)
    assert response.status_code == 303 and COOKIE in response.headers["Set-Cookie"]
    assert client.get("/page/", headers={"Host": host}).status_code == 200


def test_the_box_s_own_name_and_that_name_under_lan_are_known(client, viewer):
    here = socket.gethostname().lower()
    for host in (here, f"{here.partition('.')[0]}.lan"):
        assert _sign_in(client, viewer, host).status_code == 303, host


def test_the_api_the_callback_and_health_answer_under_any_host(client, auth, make_cron):
    cron = make_cron()
    headers = {**auth, "Host": EVIL}
    assert client.get("/health", headers={"Host": EVIL}).status_code == 200
    assert client.get(f"/open/crons/{cron['id']}", headers=headers).status_code == 200
    assert client.put(STATUS_PATH, json={"ids": [cron["id"]], "status": 1},
                      headers=headers).status_code == 200


@pytest.mark.parametrize("raw", ["http://a.example", "a.example:80", "a b", "a/b", "名前"])
def test_a_page_host_that_is_not_a_name_stops_the_start_naming_the_key(raw):
    with pytest.raises(config.ConfigError, match="QL_PAGE_HOSTS"):
        config.load(environ={"QL_PAGE_HOSTS": f"ok.example,{raw}"})


def test_page_hosts_are_read_lowercase_without_a_final_dot():
    settings = config.load(environ={"QL_PAGE_HOSTS": " A.example. ,b ,,"})
    assert settings.page_hosts == frozenset({"a.example", "b"})
