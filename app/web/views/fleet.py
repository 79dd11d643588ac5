"""The fleet: POST /open/crons/<id>/claim (task.sh of a `one` cron asks for its firing) and
GET /open/hosts (core/fleet.py)."""
from __future__ import annotations

from flask import Blueprint, current_app, request

from qlshadow.core import fleet
from qlshadow.core.legacy import decode_json
from qlshadow.errors import InvalidInput, NotFound
from qlshadow.parse import INT64_MAX
from qlshadow.storage import db
from qlshadow.web.views.common import ok, requires_scope

bp = Blueprint("fleet", __name__)


@bp.route("/open/crons/<int:cron_id>/claim", methods=["POST", "PUT"])
@requires_scope("crons", "status")  # the runner's token, as the status callback
def claim(cron_id: int):
    if cron_id > INT64_MAX:
        raise NotFound(f"Cron {cron_id} does not exist.")
    raw = request.get_data(cache=False)
    body = decode_json(raw) if raw.strip() else {}
    at = body.get("at") if isinstance(body, dict) else None
    if at is not None and (type(at) is not int or not 0 < at < 2**40):
        raise InvalidInput("'at' must be the task's start in whole seconds since the epoch.")
    settings = current_app.extensions["qlshadow"]
    taken = fleet.claim(cron_id, settings.host_name, at)
    if taken["won"]:
        return ok(taken)
    # Another host runs this firing: 409, so that task.sh tells it from an unreachable
    # service by the status alone (both mean "do not run").
    return {"code": 409, "message": f"Host {taken['host']} runs this firing.", "data": taken}, 409


@bp.route("/open/hosts", methods=["GET"])
@requires_scope("crons", "runs")
def hosts():
    return ok(fleet.hosts_listing(one_host=db.is_sqlite()))
