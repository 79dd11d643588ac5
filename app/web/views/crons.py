"""Cron endpoints of 2.x: list, show, create, update, delete, enable, disable, run, instances;
and the health of every cron (docs/CONTRACT.md §13.1, §13.2)."""
from __future__ import annotations

import logging

from flask import Blueprint, current_app, request

from qlshadow.service import crons
from qlshadow.host.crontab import CrontabError
from qlshadow.service.cron_change import change
from qlshadow.errors import InvalidInput, NotFound, Unavailable
from qlshadow.core.legacy import decode_json
from qlshadow.parse import INT64_MAX
from qlshadow.host.runner import start_manual
from qlshadow.web.views.common import ok, query_int, requires_scope

bp = Blueprint("crons", __name__, url_prefix="/open/crons")


def _body():
    return decode_json(request.get_data(cache=False))


def _changed(apply):
    """Make a cron change only when the crontab that follows from it installs (else 503)."""
    try:
        result, _ = change(current_app.extensions["qlshadow"], apply)
    except CrontabError as exc:
        # Nothing changed: neither the database nor the installed crontab. /health and
        # `qlshadow crontab` report the failure until an install succeeds.
        logging.getLogger("qlshadow").warning("cron change not made: %s", exc)
        raise Unavailable(f"The cron change was not made: {str(exc).rstrip('.')}.") from None
    return result


@bp.route("", methods=["GET"])
@requires_scope("crons")
def listing():
    page = query_int("page", 1, 1, 10**9)
    size = query_int("size", 20, 1, 500)
    return ok(crons.listing(page, size))


@bp.route("/health", methods=["GET"])
@requires_scope("crons", "runs")
def health():
    # Registered before /<int:cron_id>; read-only: one read transaction, no write lock.
    from qlshadow.watch import health as cron_health
    settings = current_app.extensions["qlshadow"]
    from qlshadow.host.crond import kind_for
    healths = cron_health.read_all(shadow="scheduled_system" in settings.shadow_origins,
                                   daemon=kind_for(settings))
    return ok([cron_health.public(h) for h in healths])


def _known_id(cron_id: int) -> int:
    """A path's cron id, or 404 when it is past 64 bits (no cron has such an id)."""
    if cron_id > INT64_MAX:
        raise NotFound(f"Cron {cron_id} does not exist.")
    return cron_id


@bp.route("/<int:cron_id>", methods=["GET"])
@requires_scope("crons")
def show(cron_id: int):
    return ok(crons.get(_known_id(cron_id)))


@bp.route("/<int:cron_id>/instances", methods=["GET"])
@requires_scope("crons")
def instances(cron_id: int):
    return ok(crons.instances(_known_id(cron_id), query_int("limit", 50, 1, 500),
                              request.args.get("host") or None))


@bp.route("/<int:cron_id>/snooze", methods=["POST"])
@requires_scope("crons")
def snooze(cron_id: int):
    # Alerting only: the crontab does not change, so no cron change (and no install).
    from qlshadow.storage.db import write_transaction
    body = _body()
    if not isinstance(body, dict) or "until" not in body:
        raise InvalidInput('The request body must be {"until": T}: epoch seconds, ISO text, '
                           "or null to end the snooze.")
    until = crons.parse_until(body["until"])
    with write_transaction():
        return ok(crons.snooze([_known_id(cron_id)], until)[0])


@bp.route("", methods=["POST"])
@requires_scope("crons")
def create():
    body, settings = _body(), current_app.extensions["qlshadow"]
    return ok(_changed(lambda planned: crons.create(body, settings, planned and planned["id"])))


@bp.route("", methods=["PUT"])
@requires_scope("crons")
def update():
    body, settings = _body(), current_app.extensions["qlshadow"]
    return ok(_changed(lambda planned: crons.update(body, settings)))


@bp.route("", methods=["DELETE"])
@requires_scope("crons")
def delete():
    ids = crons.cron_ids(_body())
    _changed(lambda planned: crons.delete(ids))
    return ok()


@bp.route("/disable", methods=["PUT"])
@requires_scope("crons")
def disable():
    ids = crons.cron_ids(_body())
    _changed(lambda planned: crons.set_disabled(ids, True))
    return ok()


@bp.route("/enable", methods=["PUT"])
@requires_scope("crons")
def enable():
    ids = crons.cron_ids(_body())
    _changed(lambda planned: crons.set_disabled(ids, False))
    return ok()


@bp.route("/run", methods=["PUT"])
@requires_scope("crons")
def run():
    ids = crons.cron_ids(_body())
    # Only reads, then starts detached runners: no transaction is held while they start.
    return ok(start_manual(current_app.extensions["qlshadow"], ids))
