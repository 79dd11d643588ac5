"""GET /open/auth/token: client credentials -> 30-day bearer token."""
from __future__ import annotations

import time

from flask import Blueprint, current_app, request

from qlshadow.core.auth import app_for_credentials, issue_token
from qlshadow.storage.db import write_transaction
from qlshadow.web.views.common import ok
from qlshadow.web.views.errors import ApiError, json_error

bp = Blueprint("auth", __name__, url_prefix="/open/auth")


def _limiter():
    from qlshadow.web.ratelimit import signin_limiter
    return signin_limiter(current_app.extensions)


@bp.route("/token", methods=["GET"])
def token():
    from qlshadow.web.ratelimit import client_key
    client_id = request.args.get("client_id", "")
    client_secret = request.args.get("client_secret", "")
    if not client_id or not client_secret:
        raise ApiError(400, "'client_id' and 'client_secret' are required.")
    address = client_key(request.remote_addr)
    wait = _limiter().retry_after(address)
    if wait:
        response = json_error(429, f"Too many failed token requests from this address; "
                                   f"try again in {wait} s.")
        response.headers["Retry-After"] = str(wait)
        return response
    if "\x00" in client_id:  # PostgreSQL cannot even compare text holding NUL
        _limiter().failed(address)
        raise ApiError(401, "The client id or client secret is wrong.")
    with write_transaction():
        app = app_for_credentials(client_id, client_secret)
        if app is not None:
            value, expiration = issue_token(app.id, int(time.time()))
    if app is None:
        _limiter().failed(address)
        raise ApiError(401, "The client id or client secret is wrong.")
    return ok({"token": value, "token_type": "Bearer", "expiration": expiration})
