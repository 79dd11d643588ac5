"""HTTP answers for errors: the core's errors, web-only ones, and everything else as JSON.

Every 4xx/5xx leaves as {"code": N, "message": "<one sentence>"}: never HTML, never a
traceback. The handlers live on the app, not a blueprint, so unmatched URLs get them too.
"""
from __future__ import annotations

import logging

from flask import jsonify, request
from peewee import DatabaseError, DataError, IntegrityError, InterfaceError
from werkzeug.exceptions import HTTPException

from .. import db, metrics
from ..errors import Conflict, InvalidInput, NotFound, QlError, Unavailable

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


def init_app(app) -> None:
    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return json_error(exc.status, exc.message)

    @app.errorhandler(QlError)
    def _core_error(exc: QlError):
        status = next((code for kind, code in STATUS_OF.items() if isinstance(exc, kind)), 500)
        return json_error(status, exc.message)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        status = exc.code or 500
        if status == 413:
            return json_error(413, f"The request body is larger than {app.config['MAX_CONTENT_LENGTH']} bytes.")
        return json_error(status, _HTTP_MESSAGES.get(status, exc.name + "."))

    @app.errorhandler(IntegrityError)
    def _conflict(exc):
        return json_error(409, "The change conflicts with existing data.")

    @app.errorhandler(DataError)
    def _data_error(exc):
        return json_error(400, "A value is out of range for the database.")

    @app.errorhandler(DatabaseError)
    @app.errorhandler(InterfaceError)
    def _db_down(exc):
        # Locked, full, restarting or unreachable: the request wrote nothing (its transaction
        # rolled back); drop the connection so the next request on this thread reconnects.
        metrics.count_write_error()
        if request.method in ("GET", "HEAD"):
            log.warning("database error: %s", db.failure_cause(exc))
        else:
            db.note_write_failed(exc)  # /health reports it; logged once per incident
        db.discard_connection()
        return json_error(503, "The database is unavailable; try again shortly.")

    @app.errorhandler(Exception)
    def _unexpected(exc):
        log.exception("unexpected error")
        return json_error(500, "Internal error; the request wrote nothing.")
