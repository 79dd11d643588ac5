"""The status callback's one web adapter: plain WSGI in front of the Flask app.

A callback through Flask spent most of its CPU in the request machinery (request and
response objects, routing, hooks), not in its two or three statements. So create_app wraps
Flask's wsgi_app (Flask's documented middleware hook) with CallbackRoute: it answers every
request for exactly /open/crons/status itself, and hands everything else, including other
spellings of that path (case, trailing slash), to Flask unchanged. Here: the method, the
connection, the token (common.authorize), the body limit, the core call
(qlshadow.core.callback.handle), every error through errors.answer_for, and the counting;
and, when the callback recorded an alert event, a wake-up of the alert sender
(watch/sender.py) once the server is done with the answer (its iterable's close()).
"""
from __future__ import annotations

import json

from werkzeug.http import HTTP_STATUS_CODES
from werkzeug.wsgi import get_input_stream

from qlshadow.storage import db
from qlshadow.core.callback import PATH, SCOPES, handle
from qlshadow.core.runtime import KEY as RUNTIME_KEY
from qlshadow.watch.sender import KEY as SENDER_KEY
from qlshadow.web.views.common import authorize
from qlshadow.web.views.errors import answer_for

OK_BODY = b'{"code":200}\n'
_OK = ("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(OK_BODY)))])
_METHODS = frozenset(("PUT", "POST"))  # POST: BusyBox wget can send only GET and POST
# The callback's answers by HTTP status, as the metrics name them.
RESULT_OF = {200: "ok", 400: "invalid", 401: "unauthorized", 403: "forbidden",
             413: "too_large", 503: "unavailable"}


class CallbackRoute:
    """WSGI middleware: the status callback answered here, everything else by `flask_wsgi`."""

    def __init__(self, app, flask_wsgi):
        self.app = app
        self.flask_wsgi = flask_wsgi

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") != PATH:
            return self.flask_wsgi(environ, start_response)
        extensions = self.app.extensions
        settings = extensions["qlshadow"]  # read per request: serve replaces it when QL_PORT=0 binds
        runtime = extensions[RUNTIME_KEY]
        if environ.get("REQUEST_METHOD") not in _METHODS:
            return _error(start_response, 405, "This method is not allowed on this endpoint.",
                          [("Allow", "POST, PUT")])
        try:
            db.ensure_connection()
            authorize(runtime.tokens, SCOPES, environ.get("HTTP_AUTHORIZATION", ""))
            _, alerted = handle(_body(environ, settings.max_body), settings, runtime)
        except Exception as exc:  # RequestEntityTooLarge too: answered like any other 413
            status, message = answer_for(exc, runtime, settings.max_body)
            runtime.counters.count_callback(RESULT_OF.get(status, "error"))
            return _error(start_response, status, message)
        runtime.counters.count_callback("ok")
        start_response(*_OK)
        if alerted:
            sender = extensions.get(SENDER_KEY)
            if sender is not None:
                return _WakeAfter(sender)
        return [OK_BODY]


class _WakeAfter:
    """The ok answer, which wakes the alert sender when the server closes it (PEP 3333:
    after the body was written), never before the callback's transaction committed."""
    __slots__ = ("sender",)

    def __init__(self, sender):
        self.sender = sender

    def __iter__(self):
        return iter((OK_BODY,))

    def close(self) -> None:
        self.sender.wake("callback")


def _error(start_response, status: int, message: str, headers: list = ()):
    body = (json.dumps({"code": status, "message": message}, separators=(",", ":"))
            + "\n").encode("ascii")
    # werkzeug's spelling of the status line (upper-case reason), as Flask's other answers.
    start_response(f"{status} {HTTP_STATUS_CODES.get(status, 'UNKNOWN').upper()}",
                   [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                    *headers])
    return [body]


def _body(environ, max_body: int) -> bytes:
    """The request body: read straight from the server when its length is declared and
    within the limit (werkzeug's wrapper cost 7 µs a callback); anything else (chunked, no
    length, too large) through werkzeug's stream, which raises the 413."""
    length = environ.get("CONTENT_LENGTH", "")
    if length.isascii() and length.isdigit() and "HTTP_TRANSFER_ENCODING" not in environ:
        size = int(length)
        if size <= max_body:
            return environ["wsgi.input"].read(size)
    return get_input_stream(environ, max_content_length=max_body).read()


def init_app(app) -> None:
    """Put the callback route in front of the Flask app's own WSGI handling."""
    app.wsgi_app = CallbackRoute(app, app.wsgi_app)
