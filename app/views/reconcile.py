"""GET /open/reconcile: the reconciliation gate's JSON document (scope runs)."""
from __future__ import annotations

import time

from flask import Blueprint

from ..errors import ApiError
from . import ok, query_int

bp = Blueprint("reconcile", __name__)

WEEK = 7 * 86400
EPOCH_MAX = 281474976710  # the largest seconds an execution id may carry


@bp.route("/open/reconcile", methods=["GET"])
def report():
    from ..reconcile import ReconcileError, reconcile  # only this route needs cronsim
    now = int(time.time())
    until = query_int("until", now, 1, EPOCH_MAX)
    since = query_int("since", max(0, until - WEEK), 0, EPOCH_MAX)
    try:
        return ok(reconcile(since, until, query_int("cron_id", None, 1, 2**63 - 1),
                            query_int("stuck_after", 3600, 0, 10**9), now=now))
    except ReconcileError as exc:
        raise ApiError(400, str(exc)) from None
