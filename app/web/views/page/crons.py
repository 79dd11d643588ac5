"""The crons list, one cron's page and one Run's page."""
from __future__ import annotations

import time

from flask import current_app

from qlshadow.parse import INT64_MAX
from qlshadow.web.views.page.common import (_, _arg_int, _daemon, _lacks_runs, _reads_runs,
                                            _render, _shadow, bp)
from qlshadow.web.views.page.signin import login_required

PAGE_SIZES = (20, 50, 100, 200)
RUNS_LIMIT = 50


@bp.route("/", methods=["GET"])
@login_required
def crons_page():
    from qlshadow.web import overview
    size = _arg_int("size", 50, 1, PAGE_SIZES[-1])
    page = _arg_int("page", 1, 1, 10**9)
    data = overview.cron_rows(page, size, int(time.time()), _shadow(), _daemon())
    pages = max(1, -(-data["total"] // size))
    return _render("crons.html", rows=data["rows"], total=data["total"], page=page,
                   pages=pages, size=size, strip=overview.STRIP)


def _cron_row(cron_id: int) -> dict | None:
    from qlshadow.storage.models import Cron
    if cron_id > INT64_MAX:  # no cron has such an id, and the database cannot compare it
        return None
    return Cron.select().where(Cron.id == cron_id).dicts().get_or_none()


@bp.route("/crons/<int:cron_id>", methods=["GET"])
@login_required
def cron_page(cron_id: int):
    from qlshadow.web import overview
    cron = _cron_row(cron_id)
    if cron is None:
        return _render("missing.html", 404,
                       what=_("Cron {id} does not exist.").format(id=cron_id))
    now, shadow = int(time.time()), _shadow()
    found, summary = overview.cron_detail(cron, now, shadow, _daemon())
    if not _reads_runs():
        return _render("cron.html", cron=cron, summary=summary, reads_runs=False)
    before = _arg_int("before", 0, 1, INT64_MAX) or None
    executions = overview.cron_executions(cron_id, shadow, RUNS_LIMIT, before, found)
    latest = executions["rows"][0] if executions["rows"] and before is None else None
    log = None
    if latest is not None:
        log = overview.log_tail(current_app.extensions["qlshadow"].log_dir, latest["log_path"])
    return _render("cron.html", cron=cron, summary=summary, rows=executions["rows"],
                   next_before=executions["next_before"], before=before, latest=latest,
                   log=log, shadow=shadow, failures=overview.cron_failures(cron_id, RUNS_LIMIT),
                   limit=RUNS_LIMIT, reads_runs=True)


@bp.route("/runs/<run_id>", methods=["GET"])
@login_required
def run_page(run_id: str):
    from qlshadow.web import overview
    from qlshadow.core.shadow import reader
    if not _reads_runs():
        return _lacks_runs(_("Runs and their logs"))
    run = reader.get_run(run_id) if reader.UUID_TEXT.fullmatch(run_id) else None
    if run is None:
        return _render("missing.html", 404,
                       what=_("Run {id} does not exist.").format(id=run_id[:40]))
    cron = _cron_row(run["cron_id"])
    from qlshadow.watch import health
    # The word every surface gives an open Run: running, stuck or finish lost.
    now = int(time.time())
    found = health.run_conditions([run], now, _shadow(), _daemon())
    health.with_conditions([run], now, _shadow(), found=found)
    condition_since = found[run["id"]][1] if run["id"] in found else None
    log = overview.log_tail(current_app.extensions["qlshadow"].log_dir,
                            run["attempt"]["log_path"])
    started = run["attempt"]["started_at"]
    duration = (run["finished_at"] - started if run["finished_at"] is not None
                and started is not None and run["finished_at"] >= started else None)
    return _render("run.html", run=run, cron=cron, log=log, duration=duration,
                   condition_since=condition_since)
