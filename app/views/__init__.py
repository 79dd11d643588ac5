"""HTTP layer: request hooks (path case, auth, connection) and the blueprints."""
from __future__ import annotations

import time

from flask import request

from .. import db
from ..auth import scopes_for_digest, sha256_hex
from ..errors import ApiError

# Paths under /open/ that need no token.
PUBLIC = frozenset({"/open/auth/token"})
_TOKEN_CACHE_MAX = 256
TOKEN_RECHECK = 60  # seconds a looked-up token is trusted before it is looked up again


def init_app(app) -> None:
    from . import auth, callback, crons, health, runs
    # Werkzeug would answer "/open//crons/status" with an HTML 308 redirect, which no error
    # handler sees; unmerged, such a path is a plain JSON 404. Set before rules are added.
    app.url_map.merge_slashes = False
    for module in (callback, crons, runs, auth, health):
        app.register_blueprint(module.bp)

    # token hash -> (scopes, expiration, recheck_at): a valid token needs no query on the
    # callbacks of the next minute; after that it is looked up again, so a token row deleted
    # to revoke it stops working within TOKEN_RECHECK seconds on every server.
    token_cache: dict = {}

    @app.before_request
    def _guard():
        path = request.path
        if path[:6].lower() == "/open/" and path != path.lower():
            raise ApiError(400, "Paths are case-sensitive; use the lowercase path.")
        if request.routing_exception is not None or path == "/health":
            return  # 404/405 need no database; /health reports on it itself
        db.ensure_connection()
        if path.startswith("/open/") and path not in PUBLIC:
            _authorize(_scopes_for(path), token_cache)


# The status callback also takes the runner's callback-only token (scope "status").
_CALLBACK_SCOPES = ("crons", "status")


def _scopes_for(path: str) -> tuple:
    """The scopes of which a token needs one for this /open/ path."""
    if path == "/open/crons/status":
        return _CALLBACK_SCOPES
    return (path.split("/", 3)[2],)


def _authorize(scopes: tuple, cache: dict) -> None:
    header = request.headers.get("Authorization", "")
    kind, _, token = header.partition(" ")
    if kind.lower() != "bearer" or not token.strip():
        raise ApiError(401, "A valid bearer token is required (Authorization: Bearer <token>).")
    # Keyed and looked up by the token's hash: the plaintext is never compared or stored.
    digest = sha256_hex(token.strip())
    now = int(time.time())
    known = cache.get(digest)
    if known is None or known[2] <= now:
        found = scopes_for_digest(digest, now)
        if found is None:
            cache.pop(digest, None)
            raise ApiError(401, "The token is unknown or has expired.")
        if len(cache) >= _TOKEN_CACHE_MAX:
            cache.clear()
        known = cache[digest] = (*found, min(found[1], now + TOKEN_RECHECK))
    if known[0].isdisjoint(scopes):
        raise ApiError(403, f"The token's app does not have the '{scopes[0]}' scope.")


def query_int(name: str, default: int | None, lo: int, hi: int) -> int | None:
    """An integer query parameter within [lo, hi], or 400 naming it."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isascii() or not raw.isdigit() or not lo <= int(raw) <= hi:
        raise ApiError(400, f"'{name}' must be an integer between {lo} and {hi}.")
    return int(raw)


def ok(data=None):
    return {"code": 200} if data is None else {"code": 200, "data": data}
