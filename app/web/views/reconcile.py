"""GET /open/reconcile: the reconciliation gate's JSON document (scope runs)."""
from __future__ import annotations

import time

from flask import Blueprint, current_app

from qlshadow.errors import InvalidInput
from qlshadow.parse import INT64_MAX, TIME_MAX
from qlshadow.web.views.common import ok, query_int, requires_scope

bp = Blueprint("reconcile", __name__, url_prefix="/open/reconcile")

WEEK = 7 * 86400


@bp.route("", methods=["GET"])
@requires_scope("runs")
def report():
    from qlshadow.watch.reconcile import ReconcileError, reconcile  # only this route needs cronsim
    from qlshadow.host.crond import kind_for
    now = int(time.time())
    until = query_int("until", now, 1, TIME_MAX)
    since = query_int("since", max(0, until - WEEK), 0, TIME_MAX)
    try:
        return ok(reconcile(since, until, query_int("cron_id", None, 1, INT64_MAX),
                            query_int("stuck_after", None, 0, 10**9), now=now,
                            daemon=kind_for(current_app.extensions["qlshadow"])))
    except ReconcileError as exc:
        raise InvalidInput(str(exc)) from None
