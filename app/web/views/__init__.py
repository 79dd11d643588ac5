"""The web app: the factory, the request hook (path case, connection) and the blueprints.

Each view declares the scope it needs with common.requires_scope; the core it calls
raises qlshadow.errors, which errors.py turns into JSON answers.
"""
from __future__ import annotations

from flask import Flask, request

from qlshadow import config
from qlshadow.storage import db, retention
from qlshadow.core.auth import ensure_system_app
from qlshadow.core.runtime import KEY as RUNTIME_KEY
from qlshadow.core.runtime import Runtime
from qlshadow.web.views import (auth, callback, crons, errors, fleet, health, metrics,
                                notifications, page, reconcile, runs, tick)
from qlshadow.web.views.common import PathId
from qlshadow.web.views.errors import ApiError


def create_app(settings: config.Settings | None = None, init_db: bool = True) -> Flask:
    """Build the Flask app over the configured database (created/upgraded when init_db)."""
    settings = settings or config.load()
    app = Flask("qlshadow")
    app.config.update(MAX_CONTENT_LENGTH=settings.max_body)
    app.extensions["qlshadow"] = settings
    app.extensions[RUNTIME_KEY] = Runtime(settings)
    app.json.sort_keys = False
    app.json.compact = True
    if settings.lang != "en":  # an English server never loads the translation module
        from qlshadow import i18n
        i18n.set_default(settings.lang)

    database, journal = db.open_database(settings, create=init_db)
    app.extensions[RUNTIME_KEY].database = database
    app.extensions["qlshadow.journal"] = journal
    if init_db:
        ensure_system_app(database)
        from qlshadow.core.fleet import start as record_host  # once: the callbacks carry its id
        app.extensions[RUNTIME_KEY].host_id = record_host(settings, db.is_sqlite())
        if db.is_sqlite():
            retention.make_reserve(settings.data_dir)  # what `prune` frees on a full disk

    init_app(app)
    errors.init_app(app)
    _own_database(app, database)
    return app


def _own_database(app, database) -> None:
    """Every request of app, the callback route's too, runs on app's own database, whatever
    another app in the same process opened since (Flask's wsgi_app: its middleware hook)."""
    inner, models = app.wsgi_app, db.database

    def wsgi_app(environ, start_response):
        before = models.bind_thread(database)
        try:
            return inner(environ, start_response)
        finally:
            models.bind_thread(before)
    app.wsgi_app = wsgi_app


def init_app(app) -> None:
    """Register the request hook, every blueprint and the callback route on app."""
    # Werkzeug would answer "/open//crons/status" with an HTML 308 redirect, which no error
    # handler sees; unmerged, such a path is a plain JSON 404. Set before rules are added.
    app.url_map.merge_slashes = False
    # Every `<int:...>` in a path: ASCII digits only, as the one integer rule reads ids.
    app.url_map.converters["int"] = PathId
    for module in (crons, runs, auth, health, reconcile, metrics, notifications, page, tick,
                   fleet):
        app.register_blueprint(module.bp)
    app.before_request(_guard)
    callback.init_app(app)


def _guard():
    path = request.path
    if path[:6].lower() == "/open/" and path != path.lower():
        raise ApiError(400, "Paths are case-sensitive; use the lowercase path.")
    if request.routing_exception is not None or path == "/health":
        return  # 404/405 need no database; /health reports on it itself
    db.ensure_connection()
