"""The status callback that crond jobs send: the whole hot path of the service.

Validate the body, then one transaction: Legacy rules 1-5, and the Shadow writer when
Shadow is on and the callback carries an execution_id. The answer is the same bytes
whatever Shadow did. `qlshadow serve` answers this route from views/fastpath.py, which
calls the same handle(); this Flask route is the reference it is tested against.
"""
from __future__ import annotations

import time

from flask import Blueprint, Response, current_app, request

from .. import db
from ..legacy import NOT_GIVEN, apply_status_callback, decode_json, parse_status_callback
from .common import requires_scope

bp = Blueprint("callback", __name__, url_prefix="/open/crons")
PATH = "/open/crons/status"
SCOPES = ("crons", "status")  # the runner's token has only "status"
OK_BODY = b'{"code":200}\n'


@bp.route("/status", methods=["PUT", "POST"])
@requires_scope(*SCOPES)
def status():
    handle(request.get_data(cache=False), current_app.extensions["qlshadow"])
    return Response(OK_BODY, status=200, mimetype="application/json")


def handle(raw: bytes, settings) -> str:
    """Parse and apply one callback body in one write transaction; raises on any refusal.

    Returns the Shadow outcome ("off" when Shadow did not run); the answer never depends
    on it (a place to count results, e.g. metrics).
    """
    cb = parse_status_callback(decode_json(raw))
    now = int(time.time())
    shadow = settings.shadow_on and cb.execution_id is not NOT_GIVEN
    # Storage health (note_write_ok / note_write_failed) belongs right around this call:
    # after it returns the transaction has committed; a peewee DatabaseError out of it
    # means nothing was written.
    return db.run_write(_write, cb, now, shadow, settings.failure_cap)


def _write(cb, now: int, shadow: bool, failure_cap: int) -> str:
    """The body of the callback's one transaction (run by db.run_write)."""
    crons = apply_status_callback(cb, now)
    # Bounded retention that must share the callback's transaction (prune_on_write(now))
    # belongs here, after the Legacy writes and outside Shadow's savepoint.
    if not shadow:
        return "off"
    # Imported here: with Shadow off (the default) the writer is never loaded.
    from ..shadow.writer import observe
    return observe(cb, crons, now, failure_cap)
