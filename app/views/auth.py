"""GET /open/auth/token: client credentials -> 30-day bearer token."""
from __future__ import annotations

import time

from flask import Blueprint, request

from ..auth import app_for_credentials, issue_token
from ..db import write_transaction
from .common import ok
from .errors import ApiError

bp = Blueprint("auth", __name__, url_prefix="/open/auth")


@bp.route("/token", methods=["GET"])
def token():
    client_id = request.args.get("client_id", "")
    client_secret = request.args.get("client_secret", "")
    if not client_id or not client_secret:
        raise ApiError(400, "'client_id' and 'client_secret' are required.")
    if "\x00" in client_id:  # PostgreSQL cannot even compare text holding NUL
        raise ApiError(401, "The client id or client secret is wrong.")
    with write_transaction():
        app = app_for_credentials(client_id, client_secret)
        if app is None:
            raise ApiError(401, "The client id or client secret is wrong.")
        value, expiration = issue_token(app.id, int(time.time()))
    return ok({"token": value, "token_type": "Bearer", "expiration": expiration})
