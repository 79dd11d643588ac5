"""Shadow read side and task logs: GET /open/runs, /open/runs/<run_id>, /open/runs/failures,
/open/runs/<run_id>/log and /open/crons/<id>/instances/<instance_id>/log."""
from __future__ import annotations

from flask import Blueprint, current_app, request

from qlshadow.errors import InvalidInput, NotFound
from qlshadow.parse import INT64_MAX
from qlshadow.core.shadow import RUN_STATES
from qlshadow.web.views.common import ok, query_int, requires_scope

bp = Blueprint("runs", __name__, url_prefix="/open/runs")
# The Run reader is imported by the views that read: an idle server never loads it.


@bp.route("", methods=["GET"])
@requires_scope("runs")
def listing():
    from qlshadow.core.shadow import reader
    state = request.args.get("state") or None
    if state is not None and state not in RUN_STATES:
        raise InvalidInput(f"'state' must be one of {', '.join(RUN_STATES)}.")
    before = request.args.get("before") or None
    if before is not None and not reader.UUID_TEXT.fullmatch(before):
        raise InvalidInput("'before' must be a run id (lowercase UUID).")
    return ok(_with_conditions(reader.list_runs(query_int("cron_id", None, 1, INT64_MAX), state,
                                                query_int("limit", 50, 1, 500), before,
                                                host=request.args.get("host") or None)))


def _with_conditions(runs: list) -> list:
    """Each Run with its derived "condition" (running, stuck, finish_lost or exited), the
    word every surface gives it (watch/health/); its stored state stays as it is."""
    import time

    from qlshadow.host.crond import kind_for
    from qlshadow.watch.health import with_conditions
    settings = current_app.extensions["qlshadow"]
    return with_conditions(runs, int(time.time()), settings.shadow_on,
                           kind_for(settings))


@bp.route("/failures", methods=["GET"])
@requires_scope("runs")
def failures():
    from qlshadow.core.shadow import reader
    return ok(reader.list_failures(query_int("limit", 50, 1, 500),
                                   query_int("before", None, 1, INT64_MAX)))


@bp.route("/<run_id>", methods=["GET"])
@requires_scope("runs")
def show(run_id: str):
    return ok(_with_conditions([_run(run_id)])[0])


def _run(run_id: str) -> dict:
    """The Run with this id, or a 404 with one sentence (an id that is no UUID included)."""
    from qlshadow.core.shadow import reader
    run = reader.get_run(run_id) if reader.UUID_TEXT.fullmatch(run_id) else None
    if run is None:
        raise NotFound(f"Run {run_id} does not exist.")
    return run


def _log_answer(owner: str, stored: str | None):
    """The tail of the log a row stores, as JSON; 404 with one sentence when it cannot be read."""
    from qlshadow.host import logs  # only the log routes read files
    if not stored:
        raise NotFound(f"{owner} has no log: its callbacks named none.")
    limit = query_int("bytes", logs.DEFAULT_BYTES, 1, logs.MAX_BYTES)
    try:
        with logs.open_log(current_app.extensions["qlshadow"].log_dir, stored) as fh:
            tail = logs.tail_bytes(fh, limit)
    except logs.LogUnavailable as exc:
        raise NotFound(f"{owner}'s log cannot be read: {exc}") from None
    return ok({**tail, "path_name": stored.rsplit("/", 1)[-1]})


@bp.route("/<run_id>/log", methods=["GET"])
@requires_scope("runs")
def run_log(run_id: str):
    """The tail of a Run's task log: the file its own callbacks named."""
    return _log_answer(f"Run {run_id}", _run(run_id)["attempt"]["log_path"])


def instance_log(cron_id: int, instance_id: int):
    """The tail of a Legacy instance's task log (registered below, under its cron's path)."""
    from qlshadow.storage.models import RunningInstance
    if cron_id > INT64_MAX or instance_id > INT64_MAX:  # no such row; SQLite cannot bind it
        raise NotFound(f"Cron {cron_id} has no instance {instance_id}.")
    stored = (RunningInstance.select(RunningInstance.log_path)
              .where(RunningInstance.id == instance_id, RunningInstance.cron == cron_id)
              .tuples().get_or_none())
    if stored is None:
        raise NotFound(f"Cron {cron_id} has no instance {instance_id}.")
    return _log_answer(f"Instance {instance_id}", stored[0])


# An instance's log sits beside its cron's instance list (/open/crons/<id>/instances), with
# the `runs` scope like every log; registered on the app from here so that both log routes
# live in one module.
bp.record_once(lambda state: state.app.add_url_rule(
    "/open/crons/<int:cron_id>/instances/<int:instance_id>/log", "runs.instance_log",
    requires_scope("runs")(instance_log), methods=["GET"]))
