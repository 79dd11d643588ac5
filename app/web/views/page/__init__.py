"""The status page: read-only HTML rendered on the server, behind a signed session cookie.

No JavaScript is needed; nothing is fetched from outside (routers are often offline). The
session cookie is signed with a key kept in the data dir, so sessions survive restarts;
each session is also stored on the server (auth.open_session), so sign-out, a changed
secret or a deleted app end it whatever copies of the cookie exist.

One blueprint, `page` (common.py, with rendering and the scope check), its request hooks
and template filters (hooks.py), signing in and out (signin.py), then the views: the crons,
one cron and one Run (crons.py), the gate and health (status.py). Each module registers on
the blueprint as it is imported, here, in that order.
"""
from __future__ import annotations

from qlshadow.web.views.page import hooks  # noqa: F401  (registers the request hooks)
from qlshadow.web.views.page import signin  # noqa: F401  (sign-in, sign-out and `/`)
from qlshadow.web.views.page import crons  # noqa: F401  (the views, in this order)
from qlshadow.web.views.page import status  # noqa: F401
from qlshadow.web.views.page.common import CHUNK, bp
from qlshadow.web.views.page.signin import COOKIE, LIFETIME

__all__ = ["CHUNK", "COOKIE", "LIFETIME", "bp"]
