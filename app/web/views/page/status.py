"""The service's own pages: the gate's verdicts and the health page."""
from __future__ import annotations

import time

from qlshadow.web.views.page.common import _, _daemon, _lacks_runs, _reads_runs, _render, bp
from qlshadow.web.views.page.hooks import _when
from qlshadow.web.views.page.signin import login_required

GATE_DAYS = 7


@bp.route("/gate", methods=["GET"])
@login_required
def gate_page():
    if not _reads_runs():
        return _lacks_runs(_("The gate's verdicts"))
    try:
        # The gate is its own module; without it the page still works and says so.
        from qlshadow.watch.reconcile import reconcile
    except ImportError:
        return _render("gate.html", gate=None)
    now = int(time.time())
    data = reconcile(now - GATE_DAYS * 86400, now, now=now, daemon=_daemon())
    failing = [c for c in data.get("crons", []) if c.get("verdict") != "pass"]
    passing = [c for c in data.get("crons", []) if c.get("verdict") == "pass"]
    return _render("gate.html", gate=data, crons=failing + passing, days=GATE_DAYS)


NOTIFICATIONS = 50  # rows of the notification log on the health page


@bp.route("/health", methods=["GET"])
@login_required
def health_page():
    from qlshadow.web import overview
    from qlshadow.web.views.health import health
    # The same document /health answers, whatever keys it has grown.
    answer = health()
    data = answer.get_json() if hasattr(answer, "get_json") else answer
    data = data.get("data", data) if isinstance(data, dict) else {}
    rows = overview.health_rows(data, _when)
    from qlshadow.core.fleet import hosts_listing
    from qlshadow.storage.db import is_sqlite
    hosts = hosts_listing(one_host=is_sqlite())  # shown for a fleet: two hosts or more
    return _render("health.html", rows=rows, hosts=hosts if len(hosts) > 1 else [],
                   notifications=overview.notification_log(NOTIFICATIONS))
