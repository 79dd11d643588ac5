"""The status callback served as plain WSGI, in front of the Flask app.

A callback through Flask spent most of its CPU in the request machinery (request and
response objects, routing, hooks), not in its two or three statements. `qlshadow serve`
mounts this handler for exactly PUT/POST /open/crons/status; every other request, and every
other spelling of that path (case, trailing slash), goes to Flask unchanged.

It does what the Flask route does, in the same order and with the same code wherever a
step has an answer of its own: the connection check (views/__init__._guard), the token
check (common.authorize), the body limit (a body within it is read straight from waitress,
anything else through werkzeug's stream with the same 413), the body and the write
(callback.handle), and every error through errors.answer_for. The answers are
byte-for-byte those of the Flask route (tests/test_fastpath.py plays every case on both).
"""
from __future__ import annotations

import json

from werkzeug.http import HTTP_STATUS_CODES
from werkzeug.wsgi import get_input_stream

from .. import db
from . import callback
from .common import authorize
from .errors import answer_for
from .metrics import count_callback

_OK = ("200 OK", [("Content-Type", "application/json"),
                  ("Content-Length", str(len(callback.OK_BODY)))])
_METHODS = frozenset(("PUT", "POST"))


def _status_line(code: int) -> str:
    # werkzeug's spelling (upper-case reason), so the status line matches Flask's too.
    return f"{code} {HTTP_STATUS_CODES.get(code, 'UNKNOWN').upper()}"


class CallbackFastPath:
    """WSGI app: the status callback here, everything else to the wrapped Flask app."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") != callback.PATH or environ.get("REQUEST_METHOD") not in _METHODS:
            return self.app(environ, start_response)
        settings = self.app.extensions["qlshadow"]  # replaced once when QL_PORT=0 binds
        try:
            db.ensure_connection()
            authorize(callback.SCOPES, environ.get("HTTP_AUTHORIZATION", ""))
            raw = _body(environ, settings.max_body)
            callback.handle(raw, settings)
        except Exception as exc:  # RequestEntityTooLarge too: answered like Flask's 413
            status, message = answer_for(exc, settings.max_body)
            count_callback(status)
            body = (json.dumps({"code": status, "message": message}, separators=(",", ":"))
                    + "\n").encode("ascii")
            start_response(_status_line(status), [("Content-Type", "application/json"),
                                                  ("Content-Length", str(len(body)))])
            return [body]
        count_callback(200)
        start_response(*_OK)
        return [callback.OK_BODY]


def _body(environ, max_body: int) -> bytes:
    """The request body: read straight from waitress when its length is declared and within
    the limit (werkzeug's wrapper cost 7 µs a callback); anything else (chunked, no length,
    too large) through werkzeug's stream, with the very 413 Flask gives."""
    length = environ.get("CONTENT_LENGTH", "")
    if length.isascii() and length.isdigit() and "HTTP_TRANSFER_ENCODING" not in environ:
        size = int(length)
        if size <= max_body:
            return environ["wsgi.input"].read(size)
    return get_input_stream(environ, max_content_length=max_body).read()


def mount(app) -> CallbackFastPath:
    """The WSGI app `serve` runs: the callback fast path in front of the Flask app."""
    return CallbackFastPath(app)
