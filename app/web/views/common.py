"""What every view shares: declared auth (requires_scope), query integers, the success body."""
from __future__ import annotations

import functools
import time

from flask import current_app, request
from werkzeug.routing import BaseConverter

from qlshadow.core.auth import TokenCache
from qlshadow.parse import INT64_MAX, parse_int, to_int
from qlshadow.core.runtime import KEY as RUNTIME_KEY
from qlshadow.core.runtime import Runtime
from qlshadow.web.views.errors import ApiError


class PathId(BaseConverter):
    """An id in a path, read by the one integer rule (parse.to_int): ASCII digits only.

    Werkzeug's own int converter takes any Unicode digit (a fullwidth "１" read as cron 1).
    An id past 64 bits still reaches its view, which answers that no such row exists; past
    40 digits the path matches no route (a 404 as well), so int() never reads a huge one.
    """
    regex = r"[0-9]{1,40}"
    part_isolating = True

    def to_python(self, value: str) -> int:
        number = to_int(value, 0, INT64_MAX)
        return int(value) if number is None else number

    def to_url(self, value) -> str:
        return str(int(value))


def runtime() -> Runtime:
    """The runtime of the app answering this request."""
    return current_app.extensions[RUNTIME_KEY]


def requires_scope(*scopes: str):
    """Declare that a view needs a bearer token whose app has any one of `scopes`."""
    def decorate(view):
        @functools.wraps(view)
        def guarded(*args, **kwargs):
            authorize(runtime().tokens, scopes, request.headers.get("Authorization", ""))
            return view(*args, **kwargs)
        guarded.required_scopes = frozenset(scopes)
        return guarded
    return decorate


def authorize(tokens: TokenCache, scopes: tuple, header: str) -> frozenset:
    """Check an Authorization header against `scopes` (any one will do); 401 or 403 if not.

    Flask-free so that the callback's WSGI route runs the very same check.
    """
    granted = token_scopes(tokens, header)
    if not granted.intersection(scopes):
        raise ApiError(403, f"The token's app does not have the '{scopes[0]}' scope.")
    return granted


def token_scopes(tokens: TokenCache, header: str) -> frozenset:
    """The scopes of a bearer token header; 401 when it is missing, unknown or expired."""
    kind, _, token = header.partition(" ")
    token = token.strip()
    if kind.lower() != "bearer" or not token:
        raise ApiError(401, "A valid bearer token is required (Authorization: Bearer <token>).")
    granted = tokens.scopes(token, int(time.time()))
    if granted is None:
        raise ApiError(401, "The token is unknown or has expired.")
    return granted


def query_int(name: str, default: int | None, lo: int, hi: int) -> int | None:
    """An integer query parameter within [lo, hi], or 400 naming it."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    return parse_int(raw, name, lo, hi)


def ok(data=None):
    """The success body: {"code": 200} or {"code": 200, "data": data}."""
    return {"code": 200} if data is None else {"code": 200, "data": data}
