"""GET /metrics: the Prometheus text format, for a bearer token with the `metrics` scope."""
from __future__ import annotations

from flask import Blueprint, Response, current_app

from qlshadow.web.views.common import requires_scope, runtime

bp = Blueprint("metrics", __name__)


@bp.route("/metrics", methods=["GET"])
@requires_scope("metrics")
def exposition():
    from qlshadow.watch import metrics  # on the first scrape: an idle server never loads it
    text = metrics.render(runtime().counters, current_app.extensions["qlshadow"],
                          runtime().pruner.policy)
    return Response(text, content_type="text/plain; version=0.0.4; charset=utf-8",
                    headers={"Cache-Control": "no-store"})
