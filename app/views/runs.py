"""Shadow read side: GET /open/runs, /open/runs/<run_id>, /open/runs/failures."""
from __future__ import annotations

from flask import Blueprint, request

from ..errors import ApiError
from ..shadow import reader
from . import ok, query_int

bp = Blueprint("runs", __name__)


@bp.route("/open/runs", methods=["GET"])
def listing():
    state = request.args.get("state") or None
    if state is not None and state not in reader.STATES:
        raise ApiError(400, f"'state' must be one of {', '.join(reader.STATES)}.")
    before = request.args.get("before") or None
    if before is not None and not reader.UUID_TEXT.fullmatch(before):
        raise ApiError(400, "'before' must be a run id (lowercase UUID).")
    return ok(reader.list_runs(query_int("cron_id", None, 1, 2**63 - 1), state,
                               query_int("limit", 50, 1, 500), before))


@bp.route("/open/runs/failures", methods=["GET"])
def failures():
    return ok(reader.list_failures(query_int("limit", 50, 1, 500),
                                   query_int("before", None, 1, 2**63 - 1)))


@bp.route("/open/runs/<run_id>", methods=["GET"])
def show(run_id: str):
    run = reader.get_run(run_id) if reader.UUID_TEXT.fullmatch(run_id) else None
    if run is None:
        raise ApiError(404, f"Run {run_id} does not exist.")
    return ok(run)
