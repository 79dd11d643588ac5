"""The status page: sign-in, the session cookie, paging and headers (what each page shows:
test_page_content.py)."""
from __future__ import annotations

import importlib.util
import os
import re
import time

import pytest

from qlshadow.storage import db
from qlshadow.web.views import create_app
from qlshadow.core.auth import create_app_record
from qlshadow.storage.models import App
from qlshadow.web.views.page import COOKIE, LIFETIME
from helpers import SHADOW_ON

pytestmark = pytest.mark.shadow_on

PAGES = ("/page/", "/page/gate", "/page/health")


@pytest.fixture
def viewer(app) -> tuple:
    """(client_id, client_secret) of an app that may sign in to the page."""
    with db.database.connection_context(), db.write_transaction():
        return create_app_record("viewer", ["crons", "runs"])


def sign_in(client, viewer):
    return client.post("/page/login", data={"client_id": viewer[0], "client_secret": viewer[1]})


def cookie_value(client) -> str | None:
    found = client.get_cookie(COOKIE, path="/page")
    return found.value if found else None


def signed(app, payload, age: int = 0) -> str:
    """A cookie signed with the server's own key, `age` seconds old."""
    from itsdangerous import TimestampSigner, URLSafeTimedSerializer

    class Aged(TimestampSigner):
        def get_timestamp(self):
            return int(time.time()) - age

    path = os.path.join(app.extensions["qlshadow"].data_dir, "page.key")
    with open(path, "rb") as fh:
        key = fh.read().strip()
    return URLSafeTimedSerializer(key, salt="qlshadow page session", signer=Aged).dumps(payload)


def session_payload(app, client) -> dict:
    """The payload of the client's current session cookie, read with the server's key."""
    from itsdangerous import URLSafeTimedSerializer
    path = os.path.join(app.extensions["qlshadow"].data_dir, "page.key")
    with open(path, "rb") as fh:
        key = fh.read().strip()
    return URLSafeTimedSerializer(key, salt="qlshadow page session").loads(cookie_value(client))


@pytest.mark.parametrize("path", PAGES + ("/page/crons/1",))
def test_a_page_without_a_session_redirects_to_sign_in_and_shows_no_data(client, make_cron, path):
    make_cron(name="secret-cron-name")
    response = client.get(path)
    assert response.status_code == 303
    assert response.headers["Location"].endswith("/page/login")
    assert b"secret-cron-name" not in response.data


def test_a_forged_cookie_redirects_to_sign_in(client, viewer, make_cron):
    make_cron(name="secret-cron-name")
    sign_in(client, viewer)
    payload, stamp, mac = cookie_value(client).split(".")
    client.set_cookie(COOKIE, f"{payload}.{stamp}.{'A' * len(mac)}", path="/page")
    response = client.get("/page/")
    assert response.status_code == 303 and b"secret-cron-name" not in response.data


def test_a_cookie_signed_for_another_app_id_without_the_key_is_refused(client, viewer):
    from itsdangerous import URLSafeTimedSerializer
    sign_in(client, viewer)  # makes the real key
    forged = URLSafeTimedSerializer("guessed", salt="qlshadow page session").dumps({"a": 1})
    client.set_cookie(COOKIE, forged, path="/page")
    assert client.get("/page/").status_code == 303


def test_an_expired_cookie_redirects_to_sign_in(app, client, viewer):
    sign_in(client, viewer)
    client.set_cookie(COOKIE, signed(app, session_payload(app, client), age=LIFETIME + 5),
                      path="/page")
    assert client.get("/page/").status_code == 303


def test_a_cookie_just_inside_its_lifetime_still_works(app, client, viewer):
    sign_in(client, viewer)
    client.set_cookie(COOKIE, signed(app, session_payload(app, client), age=LIFETIME - 60),
                      path="/page")
    assert client.get("/page/").status_code == 200


def test_sign_in_sets_a_signed_httponly_strict_cookie_with_an_expiry(client, viewer):
    response = sign_in(client, viewer)
    assert response.status_code == 303 and response.headers["Location"].endswith("/page/")
    header = response.headers["Set-Cookie"]
    assert header.startswith(COOKIE + "=")
    assert "HttpOnly" in header and "SameSite=Strict" in header and "Path=/page" in header
    assert f"Max-Age={LIFETIME}" in header and "Expires=" in header
    assert client.get("/page/").status_code == 200


def test_sign_in_with_a_token_works(client, token):
    response = client.post("/page/login", data={"token": token})
    assert response.status_code == 303
    assert client.get("/page/").status_code == 200


def test_a_wrong_secret_is_refused_with_no_cookie(client, viewer):
    response = client.post("/page/login", data={"client_id": viewer[0], "client_secret": "nope"})
    assert response.status_code == 401
    assert b"Those credentials are wrong" in response.data
    assert "Set-Cookie" not in response.headers


def test_an_app_without_the_crons_scope_cannot_sign_in(app, client):
    with db.database.connection_context(), db.write_transaction():
        client_id, secret = create_app_record("prometheus", ["metrics"])
    response = client.post("/page/login", data={"client_id": client_id, "client_secret": secret})
    assert response.status_code == 401 and "Set-Cookie" not in response.headers


def test_deleting_the_app_ends_its_sessions(client, viewer):
    sign_in(client, viewer)
    with db.database.connection_context(), db.write_transaction():
        App.delete().where(App.name == "viewer").execute()
    assert client.get("/page/").status_code == 303


def test_sign_out_clears_the_cookie_and_the_pages_refuse_again(client, viewer):
    sign_in(client, viewer)
    response = client.post("/page/logout")
    assert response.status_code == 303 and response.headers["Location"].endswith("/page/login")
    assert cookie_value(client) is None
    assert client.get("/page/").status_code == 303


def test_the_signing_key_is_private_and_survives_a_restart(app, client, viewer, make_settings):
    sign_in(client, viewer)
    path = os.path.join(app.extensions["qlshadow"].data_dir, "page.key")
    assert os.stat(path).st_mode & 0o777 == 0o600
    with open(path, "rb") as fh:
        key = fh.read()
    value = cookie_value(client)
    restarted = create_app(make_settings(**SHADOW_ON)).test_client()
    restarted.set_cookie(COOKIE, value, path="/page")
    assert restarted.get("/page/").status_code == 200
    with open(path, "rb") as fh:
        assert fh.read() == key


def test_the_pages_change_nothing_and_accept_only_get(client, viewer):
    sign_in(client, viewer)
    for path in PAGES:
        assert client.post(path).status_code == 405


def test_the_crons_page_is_paginated(client, viewer, make_cron):
    for name in ("first", "second", "third"):
        make_cron(name=name)
    sign_in(client, viewer)
    html = client.get("/page/?size=2").get_data(as_text=True)
    assert "third" in html and "second" in html and ">first<" not in html
    assert "Page 1 of 2" in html
    html = client.get("/page/?size=2&page=2").get_data(as_text=True)
    assert ">first<" in html and "third" not in html


def test_a_long_page_is_streamed_in_bounded_chunks_and_arrives_whole(client, viewer, make_cron):
    from qlshadow.web.views.page import CHUNK
    for n in range(60):
        make_cron(name=f"job-{n:02d}", command=f"task job-{n:02d}.sh " + "x" * 200)
    sign_in(client, viewer)
    response = client.get("/page/?size=60")
    assert response.status_code == 200 and response.is_streamed
    chunks = list(response.response)
    assert len(chunks) > 2
    # Each chunk is about CHUNK bytes: one piece past the threshold at most.
    assert all(len(chunk) < CHUNK + 4096 for chunk in chunks)
    html = b"".join(chunks).decode()
    assert html.rstrip().endswith("</html>")
    assert all(f">job-{n:02d}<" in html for n in range(60))
    assert response.headers["Content-Security-Policy"].startswith("default-src 'none'")


def test_a_cron_page_for_an_unknown_cron_is_a_404_page(client, viewer):
    sign_in(client, viewer)
    response = client.get("/page/crons/424242")
    assert response.status_code == 404 and b"Cron 424242 does not exist." in response.data


def test_the_gate_page_shows_the_gate_or_says_it_is_not_available(client, viewer, make_cron):
    make_cron(name="gated")
    sign_in(client, viewer)
    html = client.get("/page/gate").get_data(as_text=True)
    if importlib.util.find_spec("qlshadow.watch.reconcile") is None:
        assert "The gate is not available in this build." in html
    else:
        assert "Verdict:" in html and re.search(r'badge (pass|fail|insufficient)', html)


def test_the_gate_page_renders_the_documented_gate_document(client, viewer, monkeypatch):
    # Written against the gate's documented interface: a stand-in module answers the one call.
    import sys
    import types
    calls = []

    def reconcile(since, until, cron_id=None, stuck_after=None, tolerance=0.01, now=None,
                  daemon=None):
        calls.append((since, until, now))
        return {"window": {"since": since, "until": until},
                "gate": {"verdict": "fail", "reasons": ["cron 7 missed 2 firings"]},
                "crons": [{"cron_id": 3, "name": "fine", "schedule": "* * * * *", "expected": 10,
                           "runs": 10, "verdict": "pass", "reasons": []},
                          {"cron_id": 7, "name": "flaky", "schedule": "*/5 * * * *",
                           "expected": 12, "runs": 10, "verdict": "fail",
                           "reasons": ["missed 2 firings"]}]}
    monkeypatch.setitem(sys.modules, "qlshadow.watch.reconcile",
                        types.SimpleNamespace(reconcile=reconcile))
    sign_in(client, viewer)
    html = client.get("/page/gate").get_data(as_text=True)
    since, until, now = calls[0]
    assert until == now and until - since == 7 * 86400
    assert '<span class="badge fail">fail</span>' in html and "cron 7 missed 2 firings" in html
    assert html.index('href="/page/crons/7"') < html.index('href="/page/crons/3"')


def test_pages_forbid_scripts_frames_and_outside_fetches(client, viewer):
    response = client.get("/page/login")
    policy = response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
    assert "<script" not in response.get_data(as_text=True)
    assert "http" not in re.sub(r"<(a|form)\b[^>]*>", "", response.get_data(as_text=True)
                                ).replace("http-equiv", "")
