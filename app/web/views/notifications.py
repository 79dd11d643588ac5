"""GET /open/notifications: the notification log, newest first (scope crons or runs)."""
from __future__ import annotations

from flask import Blueprint

from qlshadow.storage.models import database
from qlshadow.web.views.common import ok, query_int, requires_scope

bp = Blueprint("notifications", __name__, url_prefix="/open/notifications")

MAX_LIMIT = 500


@bp.route("", methods=["GET"])
@requires_scope("crons", "runs")
def log():
    from qlshadow.watch.alerts import notify_log  # only this route and the tick need the alert module
    limit = query_int("limit", 50, 1, MAX_LIMIT)
    with database.atomic():  # one snapshot
        return ok(notify_log(limit))
