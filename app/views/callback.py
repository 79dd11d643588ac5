"""The status callback that crond jobs send: the whole hot path of the service.

Validate the body, then one transaction: Legacy rules 1-5, and the Shadow writer when
Shadow is on and the callback carries an execution_id. The answer is the same bytes
whatever Shadow did.
"""
from __future__ import annotations

import time

from flask import Blueprint, Response, current_app, request

from .. import metrics
from ..db import note_write_ok, write_transaction
from ..legacy import NOT_GIVEN, apply_status_callback, decode_json, parse_status_callback
from ..retention import prune_on_write
from .common import requires_scope
from .metrics import count_callback

bp = Blueprint("callback", __name__, url_prefix="/open/crons")
OK_BODY = b'{"code":200}\n'


@bp.route("/status", methods=["PUT", "POST"])
@requires_scope("crons", "status")
def status():
    settings = current_app.extensions["qlshadow"]
    cb = parse_status_callback(decode_json(request.get_data(cache=False)))
    now = int(time.time())
    shadow = settings.shadow_on and cb.execution_id is not NOT_GIVEN
    with write_transaction():
        crons = apply_status_callback(cb, now)
        if shadow:
            # Imported here: with Shadow off (the default) the writer is never loaded.
            from ..shadow.writer import observe
            outcome = observe(cb, crons, now, settings.failure_cap)
        prune_on_write(now)
    note_write_ok()
    if shadow:
        metrics.count_shadow(outcome)  # after the commit: a rolled-back outcome is not counted
    return Response(OK_BODY, status=200, mimetype="application/json")


@bp.after_request
def _count(response):
    # Every answer of this route, refusals included (auth and body errors end here too).
    count_callback(response.status_code)
    return response
