"""qlshadow: keeps 2.x QingLong cron status for system-crond jobs and, when asked,
records every execution exactly once as a Shadow Run."""
from __future__ import annotations

__version__ = "0.1.0"


def create_app(settings=None, init_db: bool = True):
    """Build the Flask app: settings -> database -> hooks -> blueprints -> error handlers."""
    import os

    from flask import Flask

    from . import config, db, errors, views

    settings = settings or config.load()
    app = Flask(__name__)
    app.config.update(MAX_CONTENT_LENGTH=settings.max_body, JSON_SORT_KEYS=False)
    app.extensions["qlshadow"] = settings
    app.json.sort_keys = False
    app.json.compact = True

    database = db.make_database(settings.db_url, settings.db_timeout)
    db.bind(database)
    app.extensions["qlshadow.journal"] = ""
    if init_db:
        if db.is_sqlite(database):
            os.makedirs(os.path.dirname(os.path.abspath(database.database)), exist_ok=True)
        app.extensions["qlshadow.journal"] = db.create_schema()
        from .auth import ensure_system_app
        with database.connection_context(), db.write_transaction():
            ensure_system_app()

    views.init_app(app)
    errors.init_app(app)
    return app
