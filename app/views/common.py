"""What every view shares: declared auth (requires_scope), query integers, the success body."""
from __future__ import annotations

import functools
import time

from flask import request

from ..auth import scopes_for_digest, sha256_hex
from ..parse import parse_int
from .errors import ApiError

_TOKEN_CACHE_MAX = 256
TOKEN_RECHECK = 60  # seconds a looked-up token is trusted before it is looked up again

# token hash -> (scopes, expiration, recheck_at): a valid token needs no query on the
# callbacks of the next minute; after that it is looked up again, so a token row deleted
# to revoke it stops working within TOKEN_RECHECK seconds on every server.
_token_cache: dict = {}


def requires_scope(*scopes: str):
    """Declare that a view needs a bearer token whose app has any one of `scopes`."""
    def decorate(view):
        @functools.wraps(view)
        def guarded(*args, **kwargs):
            authorize(scopes, request.headers.get("Authorization", ""))
            return view(*args, **kwargs)
        guarded.required_scopes = frozenset(scopes)
        return guarded
    return decorate


def forget_tokens() -> None:
    """Drop every cached token (a new app must look each one up again)."""
    _token_cache.clear()


def authorize(scopes: tuple, header: str) -> frozenset:
    """Check an Authorization header against `scopes` (any one will do); 401 or 403 if not.

    Flask-free so that the callback's fast path runs the very same check.
    """
    granted = token_scopes(header)
    if not granted.intersection(scopes):
        raise ApiError(403, f"The token's app does not have the '{scopes[0]}' scope.")
    return granted


def token_scopes(header: str) -> frozenset:
    """The scopes of a bearer token header; 401 when it is missing, unknown or expired."""
    kind, _, token = header.partition(" ")
    token = token.strip()
    if kind.lower() != "bearer" or not token:
        raise ApiError(401, "A valid bearer token is required (Authorization: Bearer <token>).")
    # Keyed and looked up by the token's hash: the plaintext is never compared or stored.
    digest = sha256_hex(token)
    now = int(time.time())
    known = _token_cache.get(digest)
    if known is None or known[2] <= now:
        found = scopes_for_digest(digest, now)
        if found is None:
            _token_cache.pop(digest, None)
            raise ApiError(401, "The token is unknown or has expired.")
        if len(_token_cache) >= _TOKEN_CACHE_MAX:
            _token_cache.clear()
        known = _token_cache[digest] = (*found, min(found[1], now + TOKEN_RECHECK))
    return known[0]


def query_int(name: str, default: int | None, lo: int, hi: int) -> int | None:
    """An integer query parameter within [lo, hi], or 400 naming it."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    return parse_int(raw, name, lo, hi)


def ok(data=None):
    """The success body: {"code": 200} or {"code": 200, "data": data}."""
    return {"code": 200} if data is None else {"code": 200, "data": data}
