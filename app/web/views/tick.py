"""POST /open/notify/tick: the crontab's tick line (shell/tick.sh) asks the service to tick.

Authenticated like the status callback (the runner's token will do); answered 202 at once,
the tick itself runs in the service's background (watch/service_tick.py), one at a time.
"""
from __future__ import annotations

from flask import Blueprint, current_app

from qlshadow.core.callback import SCOPES
from qlshadow.core.runtime import KEY as RUNTIME_KEY
from qlshadow.watch import sender
from qlshadow.watch.service_tick import Ticker, run_in_background
from qlshadow.web.views.common import requires_scope

bp = Blueprint("tick", __name__, url_prefix="/open/notify")
KEY = "qlshadow.tick"


@bp.record_once
def _make_ticker(state) -> None:
    state.app.extensions[KEY] = Ticker()


@bp.route("/tick", methods=["POST", "PUT"])  # POST: BusyBox wget can send only GET and POST
@requires_scope(*SCOPES)
def tick():
    extensions = current_app.extensions
    started = sender.wake(current_app, sender.TICK) or run_in_background(
        extensions[KEY], extensions["qlshadow"], extensions[RUNTIME_KEY].database)
    return {"code": 202, "data": {"started": started}}, 202
