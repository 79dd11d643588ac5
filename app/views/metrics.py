"""GET /metrics: the Prometheus text format, for a bearer token with the `metrics` scope."""
from __future__ import annotations

from flask import Blueprint, Response

from .. import metrics
from .common import requires_scope

bp = Blueprint("metrics", __name__)

# The status callback's answers by HTTP status, as the metrics name them.
RESULT_OF = {200: "ok", 400: "invalid", 401: "unauthorized", 403: "forbidden",
             413: "too_large", 503: "unavailable"}


def count_callback(status: int) -> None:
    """Count one status-callback answer by its HTTP status."""
    metrics.count_callback(RESULT_OF.get(status, "error"))


@bp.route("/metrics", methods=["GET"])
@requires_scope("metrics")
def exposition():
    return Response(metrics.render(), content_type="text/plain; version=0.0.4; charset=utf-8",
                    headers={"Cache-Control": "no-store"})
