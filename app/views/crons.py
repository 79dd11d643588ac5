"""Cron endpoints of 2.x: list, show, create, update, delete, enable, disable, run, instances;
and the health of every cron (docs/CONTRACT.md §12)."""
from __future__ import annotations

import logging

from flask import Blueprint, current_app, request

from .. import crons
from ..crontab import CrontabError, sync
from ..db import write_transaction
from ..legacy import decode_json
from ..runner import start_manual
from .common import ok, query_int, requires_scope

bp = Blueprint("crons", __name__, url_prefix="/open/crons")


def _body():
    return decode_json(request.get_data(cache=False))


def _changed():
    """Every cron change re-renders (and in system mode installs) the crontab."""
    try:
        sync(current_app.extensions["qlshadow"])
    except CrontabError as exc:
        # The cron change has committed and stays: the answer is still 200, the failure is
        # logged on one line, and `qlshadow crontab` reports it again (exit status 1).
        logging.getLogger("qlshadow").warning("crontab not updated: %s", exc)


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
    from .. import health as cron_health
    settings = current_app.extensions["qlshadow"]
    healths = cron_health.read_all(shadow="scheduled_system" in settings.shadow_origins)
    return ok([cron_health.public(h) for h in healths])


@bp.route("/<int:cron_id>", methods=["GET"])
@requires_scope("crons")
def show(cron_id: int):
    return ok(crons.get(cron_id))


@bp.route("/<int:cron_id>/instances", methods=["GET"])
@requires_scope("crons")
def instances(cron_id: int):
    return ok(crons.instances(cron_id, query_int("limit", 50, 1, 500)))


@bp.route("", methods=["POST"])
@requires_scope("crons")
def create():
    body = _body()
    with write_transaction():
        cron = crons.create(body, current_app.extensions["qlshadow"])
    _changed()
    return ok(cron)


@bp.route("", methods=["PUT"])
@requires_scope("crons")
def update():
    body = _body()
    with write_transaction():
        cron = crons.update(body, current_app.extensions["qlshadow"])
    _changed()
    return ok(cron)


@bp.route("", methods=["DELETE"])
@requires_scope("crons")
def delete():
    ids = crons.cron_ids(_body())
    with write_transaction():
        crons.delete(ids)
    _changed()
    return ok()


@bp.route("/disable", methods=["PUT"])
@requires_scope("crons")
def disable():
    ids = crons.cron_ids(_body())
    with write_transaction():
        crons.set_disabled(ids, True)
    _changed()
    return ok()


@bp.route("/enable", methods=["PUT"])
@requires_scope("crons")
def enable():
    ids = crons.cron_ids(_body())
    with write_transaction():
        crons.set_disabled(ids, False)
    _changed()
    return ok()


@bp.route("/run", methods=["PUT"])
@requires_scope("crons")
def run():
    ids = crons.cron_ids(_body())
    # Only reads, then starts detached runners: no transaction is held while they start.
    return ok(start_manual(current_app.extensions["qlshadow"], ids))
