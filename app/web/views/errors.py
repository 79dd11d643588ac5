"""HTTP answers for errors: the core's errors, web-only ones, and everything else as JSON.

Every 4xx/5xx leaves as {"code": N, "message": "<one sentence>"}: never HTML, never a
traceback. The handlers live on the app, not a blueprint, so unmatched URLs get them too.
"""
from __future__ import annotations

import logging

from flask import current_app, jsonify, request
from peewee import DatabaseError, DataError, IntegrityError, InterfaceError
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from qlshadow.storage import db
from qlshadow.core.runtime import KEY as RUNTIME_KEY
from qlshadow.errors import Conflict, InvalidInput, NotFound, QlError, Unavailable

log = logging.getLogger("qlshadow")

# The core's errors and the HTTP status each is answered with.
STATUS_OF = {InvalidInput: 400, NotFound: 404, Conflict: 409, Unavailable: 503}

_HTTP_MESSAGES = {
    400: "The request is malformed.",
    404: "No such endpoint.",
    405: "This method is not allowed on this endpoint.",
    413: "The request body is too large.",
}


class ApiError(Exception):
    """A web-only answer (401, 403, a non-lowercase path): an HTTP status and one sentence."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def json_error(status: int, message: str):
    response = jsonify(code=status, message=message)
    response.status_code = status
    return response


def answer_for(exc: Exception, runtime, max_body: int, writing: bool = True) -> tuple:
    """(status, message) for an error, with its side effects (log, drop a broken connection).

    The one mapping from errors to answers: the Flask handlers below and the callback's
    route (views/callback.py) both use it, so both answer every error alike.
    """
    if isinstance(exc, ApiError):
        return exc.status, exc.message
    if isinstance(exc, QlError):
        return next((code for kind, code in STATUS_OF.items() if isinstance(exc, kind)), 500), exc.message
    if isinstance(exc, HTTPException):
        status = exc.code or 500
        if status == 413:
            return 413, f"The request body is larger than {max_body} bytes."
        return status, _HTTP_MESSAGES.get(status, exc.name + ".")
    if isinstance(exc, IntegrityError):
        return 409, "The change conflicts with existing data."
    if isinstance(exc, DataError):
        return 400, "A value is out of range for the database."
    if isinstance(exc, (DatabaseError, InterfaceError)):
        # Locked, full, restarting or unreachable: the request wrote nothing (its transaction
        # rolled back); drop the connection so the next request on this thread reconnects.
        if writing:
            runtime.counters.count_write_error()
            runtime.writes.note_failed(exc)  # /health reports it; logged once per incident
        else:
            log.warning("database error: %s", db.failure_cause(exc))
        db.discard_connection()
        return 503, "The database is unavailable; try again shortly."
    log.error("unexpected error", exc_info=exc)
    return 500, "Internal error; the request wrote nothing."


def _no_options():
    """OPTIONS is a method no path takes (no CORS, no WebDAV): a JSON 405 like any other.

    Flask would answer it itself on every route with a 200 and an Allow header; this runs
    before that, after routing, so an unknown path stays a 404.
    """
    if request.method == "OPTIONS" and request.url_rule is not None:
        # Every rule of the path counts: /open/crons has one per method.
        adapter = current_app.url_map.bind_to_environ(request.environ)
        raise MethodNotAllowed(valid_methods=sorted(set(adapter.allowed_methods()) - {"OPTIONS"}))


def init_app(app) -> None:
    def answer(exc):
        writing = request.method not in ("GET", "HEAD")
        response = json_error(*answer_for(exc, app.extensions[RUNTIME_KEY],
                                          app.config["MAX_CONTENT_LENGTH"], writing))
        if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
            response.headers["Allow"] = ", ".join(
                sorted(set(exc.valid_methods) - {"OPTIONS"}))
        return response

    app.before_request(_no_options)
    # Registered per class so that Flask picks the same one answer_for would.
    for kind in (ApiError, QlError, HTTPException, IntegrityError, DataError, DatabaseError,
                 InterfaceError, Exception):
        app.register_error_handler(kind, answer)
