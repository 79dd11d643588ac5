"""The runtime of one app: everything that changes while the service runs.

Settings are read once and never change (app.extensions["qlshadow"]); what lives between
requests is here instead of in module globals: the token cache, the counters, whether
writes work, and retention's cursors. create_app makes one, so two apps in one process
(the tests make many) share nothing and nothing needs resetting.
"""
from __future__ import annotations

from . import db, metrics, retention
from .auth import TokenCache

KEY = "qlshadow.runtime"  # where create_app keeps it: app.extensions[KEY]


class Runtime:
    """The mutable state of one app; each part is safe to use from every request thread."""
    __slots__ = ("tokens", "counters", "writes", "pruner")

    def __init__(self, settings):
        self.tokens = TokenCache()
        self.counters = metrics.Counters()
        self.writes = db.WriteHealth()
        self.pruner = retention.Pruner(retention.policy_of(settings))
