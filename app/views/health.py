"""GET /health: no token; 503 with db "unavailable" when the database cannot answer."""
from __future__ import annotations

from flask import Blueprint, current_app, jsonify
from peewee import DatabaseError, InterfaceError

from .. import __version__, db
from ..models import database

bp = Blueprint("health", __name__)


@bp.route("/health", methods=["GET"])
def health():
    settings = current_app.extensions["qlshadow"]
    data = {"status": "ok", "db": "ok", "version": __version__, "scheduler": settings.scheduler,
            "shadow_origins": sorted(settings.shadow_origins)}
    # Kept in a file next to the crontab until an install succeeds (see crontab.sync).
    from ..crontab import install_state
    data["crontab"] = install_state(settings)
    try:
        db.ensure_connection()
        database.execute_sql("SELECT 1").fetchone()
    except (DatabaseError, InterfaceError):
        db.discard_connection()
        data.update(status="error", db="unavailable")
        response = jsonify(code=503, message="The database is unavailable.", data=data)
        response.status_code = 503
        return response
    return jsonify(code=200, data=data)
