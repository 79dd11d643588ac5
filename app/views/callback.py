"""The status callback that crond jobs send: the whole hot path of the service.

Validate the body, then one transaction: Legacy rules 1-5, and the Shadow writer when
Shadow is on and the callback carries an execution_id. The answer is the same bytes
whatever Shadow did. `qlshadow serve` answers this route from views/fastpath.py, which
calls the same handle(); this Flask route is the reference it is tested against.
"""
from __future__ import annotations

import time

from flask import Blueprint, Response, current_app, request

from .. import db, metrics
from ..db import note_write_ok
from ..legacy import NOT_GIVEN, apply_status_callback, decode_json, parse_status_callback
from ..retention import prune_on_write
from .common import requires_scope
from .metrics import count_callback

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
    outcome = db.run_write(_write, cb, now, shadow, settings.failure_cap)
    # Committed: /health hears that writes work, and the Shadow outcome is counted (a
    # rolled-back one never is). A database error out of run_write wrote nothing; the error
    # answer (views/errors.answer_for) records it with note_write_failed.
    note_write_ok()
    if outcome != "off":
        metrics.count_shadow(outcome)
    return outcome


def _write(cb, now: int, shadow: bool, failure_cap: int) -> str:
    """The body of the callback's one transaction (run by db.run_write)."""
    crons = apply_status_callback(cb, now)
    # Bounded retention shares the callback's transaction, outside Shadow's savepoint.
    prune_on_write(now)
    if not shadow:
        return "off"
    return (_observe or _load_writer())(cb, crons, now, failure_cap)


_observe = None


def _load_writer():
    # Imported on first use: with Shadow off (the default) the writer is never loaded; once
    # loaded it is kept here, not looked up by an import statement on every callback.
    global _observe
    from ..shadow.writer import observe
    _observe = observe
    return observe


@bp.after_request
def _count(response):
    # Every answer of this route, refusals included (auth and body errors end here too).
    count_callback(response.status_code)
    return response
