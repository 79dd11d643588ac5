"""Shadow read side: GET /open/runs, /open/runs/<run_id>, /open/runs/failures."""
from __future__ import annotations

from flask import Blueprint, request

from ..errors import InvalidInput, NotFound
from ..parse import INT64_MAX
from ..shadow import RUN_STATES, reader
from .common import ok, query_int, requires_scope

bp = Blueprint("runs", __name__, url_prefix="/open/runs")


@bp.route("", methods=["GET"])
@requires_scope("runs")
def listing():
    state = request.args.get("state") or None
    if state is not None and state not in RUN_STATES:
        raise InvalidInput(f"'state' must be one of {', '.join(RUN_STATES)}.")
    before = request.args.get("before") or None
    if before is not None and not reader.UUID_TEXT.fullmatch(before):
        raise InvalidInput("'before' must be a run id (lowercase UUID).")
    return ok(reader.list_runs(query_int("cron_id", None, 1, INT64_MAX), state,
                               query_int("limit", 50, 1, 500), before))


@bp.route("/failures", methods=["GET"])
@requires_scope("runs")
def failures():
    return ok(reader.list_failures(query_int("limit", 50, 1, 500),
                                   query_int("before", None, 1, INT64_MAX)))


@bp.route("/<run_id>", methods=["GET"])
@requires_scope("runs")
def show(run_id: str):
    run = reader.get_run(run_id) if reader.UUID_TEXT.fullmatch(run_id) else None
    if run is None:
        raise NotFound(f"Run {run_id} does not exist.")
    return ok(run)
