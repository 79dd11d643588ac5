"""GET /health: no token; whether the database answers and writes succeed, and storage figures.

503 when the database cannot answer, the last write failed, or the last crontab install
failed (the cause is named). Cheap enough to poll: one SELECT 1, a few stat calls, no table
read, and with a crontab installed a scan of /proc for crond (app/host/crond.py).
"""
from __future__ import annotations

from flask import Blueprint, current_app, jsonify
from peewee import DatabaseError, InterfaceError

from qlshadow import __version__
from qlshadow.storage import db
from qlshadow.host.crontab import install_failed, install_state
from qlshadow.storage.models import database
from qlshadow.web.views.common import runtime

bp = Blueprint("health", __name__)


@bp.route("/health", methods=["GET"])
def health():
    settings = current_app.extensions["qlshadow"]
    write = runtime().writes.state()
    data = {"status": "ok", "db": "ok", "version": __version__, "scheduler": settings.scheduler,
            "shadow_origins": sorted(settings.shadow_origins),
            "last_write": {"ok": write["ok"], "cause": write["cause"], "since": write["since"],
                           "failures": write["failures"]},
            "storage": db.storage_figures(settings.data_dir),
            "crontab": install_state(settings)}
    if data["crontab"] == "installed":
        from qlshadow.host.crond import crontab_words  # a /proc scan, only with a crontab installed
        data["crontab"] = crontab_words(data["crontab"])
    crontab = data["crontab"]
    try:
        db.ensure_connection()
        database.execute_sql("SELECT 1").fetchone()
        data["storage"].update(_budget(settings))
    except (DatabaseError, InterfaceError):
        db.discard_connection()
        data.update(status="error", db="unavailable")
        return _unavailable("The database is unavailable.", data)
    if not write["ok"]:
        data.update(status="error")
        return _unavailable(f"Writes are failing: {write['cause']}.", data)
    if install_failed(crontab):
        # A cron change was refused, or crond runs an older crontab than the database
        # holds (a failed start-up install): either needs the operator. Cleared by the
        # next install that succeeds.
        data.update(status="error")
        return _unavailable(f"The crontab is {crontab.rstrip('.')}.", data)
    return jsonify(code=200, data=data)


def _unavailable(message: str, data: dict):
    response = jsonify(code=503, message=message, data=data)
    response.status_code = 503
    return response


def _budget(settings) -> dict:
    """Use against QL_STORAGE_BUDGET (SQLite: database pages in use, WAL, task logs)."""
    from qlshadow.storage.retention import policy_of, storage_use
    policy = policy_of(settings)
    if not policy.db_path:  # PostgreSQL: no budget, as db_bytes is null there
        return {"used_bytes": None, "budget_bytes": None, "log_bytes": None}
    use = storage_use(policy)
    return {"used_bytes": use["used_bytes"], "budget_bytes": use["budget_bytes"],
            "log_bytes": use["log_bytes"]}
