"""Auth (CONTRACT.md §2.2): apps with scopes, 30-day bearer tokens stored as SHA-256 hashes, the
system app and its token.json, 401/403, and 400 for non-lowercase /open/ paths."""
from __future__ import annotations

import hashlib
import json
import os
import stat
import time

import pytest

from qlshadow.storage import db
from qlshadow.core.auth import TOKEN_LIFETIME, create_app_record
from qlshadow.storage.models import App, Cron, RunningInstance, Token
from helpers import ONE_BACKEND, cli_env, fixture_body, run_cli, table_rows


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def new_app(app):
    """Create an app with the given scopes; returns (client_id, client_secret)."""
    def make(name="reporter", scopes=("crons", "runs")):
        with db.database.connection_context(), db.write_transaction():
            return create_app_record(name, scopes)
    return make


def get_token(client, client_id, client_secret):
    return client.get("/open/auth/token",
                      query_string={"client_id": client_id, "client_secret": client_secret})


def bearer(value: str) -> dict:
    return {"Authorization": f"Bearer {value}"}


def expire_tokens() -> None:
    with db.database.connection_context():
        Token.update(expiration=int(time.time()) - 1).execute()


# --- GET /open/auth/token -------------------------------------------------------------------

def test_right_credentials_get_a_30_day_bearer_token(client, new_app):
    client_id, secret = new_app()
    before = int(time.time())

    response = get_token(client, client_id, secret)

    data = response.get_json()["data"]
    assert response.status_code == 200 and response.get_json()["code"] == 200
    assert data["token_type"] == "Bearer"
    assert before + TOKEN_LIFETIME <= data["expiration"] <= int(time.time()) + TOKEN_LIFETIME
    assert TOKEN_LIFETIME == 30 * 24 * 3600


def test_the_issued_token_opens_the_api(client, new_app):
    token = get_token(client, *new_app()).get_json()["data"]["token"]

    response = client.get("/open/crons", headers=bearer(token))

    assert response.status_code == 200


def test_a_wrong_secret_is_a_401(client, new_app):
    client_id, secret = new_app()

    response = get_token(client, client_id, secret[:-1] + ("A" if secret[-1] != "A" else "B"))

    assert (response.status_code, response.get_json()["code"]) == (401, 401)


def test_an_unknown_client_is_a_401(client, new_app):
    _, secret = new_app()

    response = get_token(client, "0123456789abcdef", secret)

    assert (response.status_code, response.get_json()["code"]) == (401, 401)


def test_another_apps_secret_is_a_401(client, new_app):
    first_id, _ = new_app("first")
    _, second_secret = new_app("second")

    assert get_token(client, first_id, second_secret).status_code == 401


@ONE_BACKEND
def test_missing_credentials_are_a_400(client):
    for query in ({}, {"client_id": "x"}, {"client_secret": "y"}, {"client_id": "", "client_secret": "y"}):
        response = client.get("/open/auth/token", query_string=query)
        assert (response.status_code, response.get_json()["code"]) == (400, 400), query


def test_a_refused_credential_issues_no_token(client, new_app):
    client_id, secret = new_app()
    count = len(table_rows(Token))

    get_token(client, client_id, secret + "x")

    assert len(table_rows(Token)) == count


# --- hashes only ----------------------------------------------------------------------------

def test_client_secrets_are_stored_only_as_sha256_hashes(client, new_app):
    client_id, secret = new_app()

    [row] = [r for r in table_rows(App) if r["client_id"] == client_id]
    assert row["client_secret_hash"] == sha256(secret)
    assert secret not in json.dumps(table_rows(App))


def test_tokens_are_stored_only_as_sha256_hashes(client, new_app):
    token = get_token(client, *new_app()).get_json()["data"]["token"]

    stored = table_rows(Token)
    assert sha256(token) in [r["token_hash"] for r in stored]
    assert token not in json.dumps(stored)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_the_sqlite_file_never_holds_a_plaintext_secret_or_token(client, new_app, db_url):
    client_id, secret = new_app()
    token = get_token(client, client_id, secret).get_json()["data"]["token"]
    db.discard_connection()
    path = db_url[len("sqlite:///"):]
    raw = b""
    for suffix in ("", "-wal"):
        if os.path.exists(path + suffix):
            with open(path + suffix, "rb") as fh:
                raw += fh.read()

    assert client_id.encode() in raw  # the scan does see what is stored
    assert secret.encode() not in raw and token.encode() not in raw


# --- bearer checks --------------------------------------------------------------------------

@ONE_BACKEND
def test_a_missing_token_is_a_401(client):
    response = client.get("/open/crons")

    assert (response.status_code, response.get_json()["code"]) == (401, 401)


@ONE_BACKEND
def test_a_malformed_authorization_header_is_a_401(client, token):
    for header in ("Bearer", "Bearer ", "Basic abc", "abc", "Token abc", f"Basic {token}"):
        response = client.get("/open/crons", headers={"Authorization": header})
        assert response.status_code == 401, header


def test_an_unknown_token_is_a_401(client, token):
    assert client.get("/open/crons", headers=bearer("not-a-token")).status_code == 401


def test_a_token_differing_in_one_character_is_a_401(client, token):
    changed = token[:-1] + ("a" if token[-1] != "a" else "b")

    assert client.get("/open/crons", headers=bearer(changed)).status_code == 401
    assert client.get("/open/crons", headers=bearer(token)).status_code == 200


def test_the_stored_hash_itself_is_not_a_token(client, token):
    assert client.get("/open/crons", headers=bearer(sha256(token))).status_code == 401


def test_an_expired_token_is_a_401(client, token):
    expire_tokens()

    response = client.get("/open/crons", headers=bearer(token))

    assert (response.status_code, response.get_json()["code"]) == (401, 401)


def test_a_token_already_checked_is_refused_once_its_30_days_are_over(client, token, monkeypatch):
    import qlshadow.web.views.common
    assert client.get("/open/crons", headers=bearer(token)).status_code == 200
    later = time.time() + TOKEN_LIFETIME + 1
    # Only the clock the auth hook reads moves on; the database is the real one.
    monkeypatch.setattr(qlshadow.web.views.common, "time",
                        type("Clock", (), {"time": staticmethod(lambda: later)}))

    response = client.get("/open/crons", headers=bearer(token))

    assert (response.status_code, response.get_json()["code"]) == (401, 401)


def test_a_token_deleted_from_the_database_stops_working_within_a_minute(client, token,
                                                                         monkeypatch):
    import qlshadow.web.views.common
    from qlshadow.core.auth import TokenCache
    from qlshadow.storage.models import Token
    assert client.get("/open/crons", headers=bearer(token)).status_code == 200
    Token.delete().execute()  # revoke every token, as an operator would
    later = time.time() + TokenCache.RECHECK + 1
    monkeypatch.setattr(qlshadow.web.views.common, "time",
                        type("Clock", (), {"time": staticmethod(lambda: later)}))

    response = client.get("/open/crons", headers=bearer(token))

    assert (response.status_code, response.get_json()["code"]) == (401, 401)


def test_a_token_of_an_app_without_the_scope_is_a_403(client, new_app):
    token = get_token(client, *new_app("runs-only", ["runs"])).get_json()["data"]["token"]

    response = client.get("/open/crons", headers=bearer(token))

    assert (response.status_code, response.get_json()["code"]) == (403, 403)
    assert "crons" in response.get_json()["message"]


def test_a_callback_with_a_token_without_the_crons_scope_writes_nothing(client, auth, make_cron, new_app):
    cron = make_cron()
    token = get_token(client, *new_app("runs-only", ["runs"])).get_json()["data"]["token"]
    before = table_rows(Cron), table_rows(RunningInstance)

    response = client.put("/open/crons/status", headers=bearer(token),
                          json=fixture_body("callback_running", ids=[str(cron["id"])]))

    assert response.status_code == 403
    assert (table_rows(Cron), table_rows(RunningInstance)) == before


def test_a_token_of_an_app_with_the_scope_passes(client, new_app):
    token = get_token(client, *new_app("crons-only", ["crons"])).get_json()["data"]["token"]

    assert client.get("/open/crons", headers=bearer(token)).status_code == 200


def test_the_health_check_needs_no_token(client):
    assert client.get("/health").status_code == 200


# --- the system app and token.json ----------------------------------------------------------

def test_the_system_app_exists_once_the_service_has_started(app):
    rows = [r for r in table_rows(App) if r["name"] == "system"]

    assert [r["scopes"] for r in rows] == ["crons,runs"]


def _token_file(app) -> str:
    return app.extensions["qlshadow"].token_file


def _read_token(app) -> dict:
    with open(_token_file(app), encoding="utf-8") as fh:
        return json.load(fh)


def test_token_system_writes_a_valid_private_token_file(app, client):
    run_cli(cli_env(app.extensions["qlshadow"]), "token", "system")

    token = _read_token(app)
    assert set(token) == {"value", "expiration"}
    assert stat.S_IMODE(os.stat(_token_file(app)).st_mode) == 0o600
    assert token["expiration"] > time.time() + TOKEN_LIFETIME - 3600
    assert client.get("/open/crons", headers=bearer(token["value"])).status_code == 200
    assert client.get("/open/runs", headers=bearer(token["value"])).status_code != 403


def test_token_system_reuses_an_unexpired_token(app):
    env = cli_env(app.extensions["qlshadow"])
    run_cli(env, "token", "system")
    first = _read_token(app)

    run_cli(env, "token", "system")

    assert _read_token(app) == first


def test_token_system_replaces_an_expired_token(app, client):
    env = cli_env(app.extensions["qlshadow"])
    run_cli(env, "token", "system")
    first = _read_token(app)
    expire_tokens()

    run_cli(env, "token", "system")

    second = _read_token(app)
    assert second["value"] != first["value"]
    assert client.get("/open/crons", headers=bearer(second["value"])).status_code == 200


def test_token_system_replaces_a_token_the_database_does_not_know(app, client):
    env = cli_env(app.extensions["qlshadow"])
    os.makedirs(os.path.dirname(_token_file(app)), exist_ok=True)
    with open(_token_file(app), "w", encoding="utf-8") as fh:
        json.dump({"value": "forged", "expiration": int(time.time()) + 10**6}, fh)

    run_cli(env, "token", "system")

    token = _read_token(app)
    assert token["value"] != "forged"
    assert client.get("/open/crons", headers=bearer(token["value"])).status_code == 200


def test_token_system_replaces_a_corrupt_token_file(app, client):
    os.makedirs(os.path.dirname(_token_file(app)), exist_ok=True)
    with open(_token_file(app), "w", encoding="utf-8") as fh:
        fh.write("{not json")

    run_cli(cli_env(app.extensions["qlshadow"]), "token", "system")

    assert client.get("/open/crons", headers=bearer(_read_token(app)["value"])).status_code == 200


# --- case-sensitive paths -------------------------------------------------------------------

VARIANTS = ["/OPEN/crons/status", "/open/Crons/status", "/Open/crons/status", "/open/crons/STATUS"]


@pytest.mark.parametrize("with_token", [True, False], ids=["token", "no-token"])
def test_a_non_lowercase_open_path_is_a_400_that_never_reaches_the_handler(
        client, auth, make_cron, with_token):
    cron = make_cron()
    before = table_rows(Cron), table_rows(RunningInstance)
    body = fixture_body("callback_running", ids=[str(cron["id"])])

    for path in VARIANTS:
        for method in ("PUT", "POST"):
            response = client.open(path, method=method, json=body, headers=auth if with_token else {})
            assert (response.status_code, response.get_json()["code"]) == (400, 400), (path, method)

    assert (table_rows(Cron), table_rows(RunningInstance)) == before


@ONE_BACKEND
def test_other_non_lowercase_open_paths_are_a_400(client, auth):
    for path in ("/OPEN/crons", "/open/CRONS", "/OPEN/auth/token", "/open/Auth/token", "/OPEN/x"):
        response = client.get(path, headers=auth)
        assert (response.status_code, response.get_json()["code"]) == (400, 400), path
