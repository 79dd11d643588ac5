"""Status page sessions are stored on the server: sign-out, a changed secret and a deleted
app end them whatever copies of the cookie exist; the page's POSTs refuse another site's
Origin; failed sign-ins and token requests are limited per address with bounded memory
(both databases)."""
from __future__ import annotations

import os

import pytest

from qlshadow.storage import db
from qlshadow.core.auth import create_app_record, sha256_hex
from qlshadow.storage.models import App, Token
from qlshadow.web.ratelimit import LIMIT, FailureLimiter, client_key
from qlshadow.web.views.page import COOKIE

SAME = {"Origin": "http://localhost"}


@pytest.fixture
def viewer(app) -> tuple:
    with db.database.connection_context(), db.write_transaction():
        return create_app_record("viewer", ["crons", "runs"])


def sign_in(client, viewer, headers=SAME, address="127.0.0.1"):
    return client.post("/page/login", data={"client_id": viewer[0], "client_secret": viewer[1]},
                       headers=headers, environ_base={"REMOTE_ADDR": address})


def cookie(client) -> str:
    return client.get_cookie(COOKIE, path="/page").value


def with_cookie(app, value: str):
    other = app.test_client()
    other.set_cookie(COOKIE, value, path="/page")
    return other


# --- revocation -----------------------------------------------------------------------------

def test_sign_out_ends_the_session_for_every_copy_of_the_cookie(app, client, viewer):
    sign_in(client, viewer)
    copy = with_cookie(app, cookie(client))
    assert copy.get("/page/").status_code == 200

    assert client.post("/page/logout", headers=SAME).status_code == 303

    assert copy.get("/page/").status_code == 303


def test_a_changed_secret_ends_the_apps_sessions(app, client, viewer):
    sign_in(client, viewer)
    assert client.get("/page/").status_code == 200
    with db.database.connection_context(), db.write_transaction():
        App.update(client_secret_hash=sha256_hex("a new secret")).where(
            App.name == "viewer").execute()
    assert client.get("/page/").status_code == 303


def test_a_deleted_app_ends_its_sessions_and_leaves_no_session_row(app, client, viewer):
    sign_in(client, viewer)
    with db.database.connection_context(), db.write_transaction():
        app_id = App.get(App.name == "viewer").id
        assert Token.select().where(Token.app == app_id).count() == 1
        App.delete().where(App.id == app_id).execute()
    assert client.get("/page/").status_code == 303
    with db.database.connection_context():
        assert Token.select().where(Token.app == app_id).count() == 0


def test_other_sessions_of_the_app_survive_one_sign_out(app, client, viewer):
    sign_in(client, viewer)
    second = app.test_client()
    sign_in(second, viewer)
    client.post("/page/logout", headers=SAME)
    assert second.get("/page/").status_code == 200


def test_a_session_is_not_a_bearer_token(app, client, viewer):
    from itsdangerous import URLSafeTimedSerializer
    sign_in(client, viewer)
    with open(os.path.join(app.extensions["qlshadow"].data_dir, "page.key"), "rb") as fh:
        key = fh.read().strip()
    nonce = URLSafeTimedSerializer(key, salt="qlshadow page session").loads(cookie(client))["n"]
    for guess in (nonce, "page session|" + nonce, cookie(client)):
        response = client.get("/open/crons", headers={"Authorization": f"Bearer {guess}"})
        assert response.status_code == 401


def test_sign_ins_do_not_grow_the_token_table(app, client, viewer):
    import time
    for _ in range(3):
        sign_in(client, viewer)
    with db.database.connection_context(), db.write_transaction():
        app_id = App.get(App.name == "viewer").id
        Token.update(expiration=int(time.time()) - 1).where(Token.app == app_id).execute()
    sign_in(client, viewer)
    with db.database.connection_context():
        assert Token.select().where(Token.app == app_id).count() == 1


# --- origin ---------------------------------------------------------------------------------

@pytest.mark.parametrize("headers", [{"Origin": "http://evil.example"}, {"Origin": "null"},
                                     {"Referer": "http://evil.example/form"}])
def test_a_sign_in_from_another_site_is_refused_with_no_cookie(client, viewer, headers):
    response = sign_in(client, viewer, headers=headers)
    assert response.status_code == 403
    assert "another site" in response.get_data(as_text=True)
    assert "Set-Cookie" not in response.headers


@pytest.mark.parametrize("headers", [SAME, {"Referer": "http://localhost/page/login"}, {}])
def test_a_sign_in_from_this_site_or_no_page_works(client, viewer, headers):
    assert sign_in(client, viewer, headers=headers).status_code == 303


def test_the_page_lets_browsers_send_its_origin_with_its_own_forms(client):
    # Under "no-referrer" a browser sends "Origin: null", which the check refuses.
    assert client.get("/page/login").headers["Referrer-Policy"] == "same-origin"


def test_a_sign_out_from_another_site_is_refused_and_the_session_stays(client, viewer):
    sign_in(client, viewer)
    response = client.post("/page/logout", headers={"Origin": "http://evil.example"})
    assert response.status_code == 403
    assert client.get("/page/").status_code == 200


# --- rate limits ----------------------------------------------------------------------------

def test_failed_sign_ins_are_limited_per_address_with_retry_after(client, viewer):
    wrong = (viewer[0], "wrong")
    for _ in range(LIMIT):
        assert sign_in(client, wrong, address="192.0.2.7").status_code == 401

    refused = sign_in(client, viewer, address="192.0.2.7")  # even the right secret
    assert refused.status_code == 429
    assert 0 < int(refused.headers["Retry-After"]) <= 300
    assert "Too many failed sign-ins" in refused.get_data(as_text=True)
    assert sign_in(client, viewer, address="192.0.2.8").status_code == 303


def test_failed_token_requests_are_limited_and_share_the_count(client, viewer):
    def token(secret, address="198.51.100.9"):
        return client.get(f"/open/auth/token?client_id={viewer[0]}&client_secret={secret}",
                          environ_base={"REMOTE_ADDR": address})
    for _ in range(LIMIT - 1):
        assert token("wrong").status_code == 401
    assert sign_in(client, (viewer[0], "wrong"), address="198.51.100.9").status_code == 401

    refused = token(viewer[1])
    assert (refused.status_code, refused.get_json()["code"]) == (429, 429)
    assert int(refused.headers["Retry-After"]) > 0
    assert token(viewer[1], address="198.51.100.10").status_code == 200


def test_successful_token_requests_are_never_limited(client, viewer):
    for _ in range(LIMIT * 2):
        response = client.get(f"/open/auth/token?client_id={viewer[0]}&client_secret={viewer[1]}")
        assert response.status_code == 200


def test_the_limiter_holds_a_bounded_number_of_addresses_and_forgets_after_its_window():
    now = [1000.0]
    limiter = FailureLimiter(limit=2, window=60, size=4, clock=lambda: now[0])
    for n in range(50):
        limiter.failed(f"10.0.0.{n}")
    assert len(limiter) == 4
    limiter.failed("a")
    limiter.failed("a")
    assert limiter.retry_after("a") == 60
    now[0] += 59.5
    assert limiter.retry_after("a") == 1
    now[0] += 0.5
    assert limiter.retry_after("a") == 0


def test_ipv6_addresses_count_per_64_and_mapped_ipv4_as_ipv4():
    assert client_key("2001:db8:1:2::5") == client_key("2001:db8:1:2:ffff::1")
    assert client_key("2001:db8:1:2::5") != client_key("2001:db8:1:3::5")
    assert client_key("::ffff:192.0.2.1") == client_key("192.0.2.1") == "192.0.2.1"


