"""The page's one blueprint and what its views share: rendering in the viewer's language,
the `runs` scope check, query integers and the settings a page is judged by."""
from __future__ import annotations

import time

from flask import Blueprint, Response, current_app, g, request, stream_template

from qlshadow import __version__

bp = Blueprint("page", __name__, url_prefix="/page")
# What the pages show (overview, health, the Run reader) is imported by the view that shows
# it: a server nobody opens a page on never loads it (about 0.3 MiB of an idle router's RSS).


def _(message: str) -> str:
    """A sentence in the page's language, also while the page streams after its view has
    returned (the translation module loads with the first page)."""
    from qlshadow.i18n import current, translate
    return translate(g.get("lang") or current(), message)


def _gettext(message: str, **values) -> str:
    """A template's _(): the page's language, %(name)s placeholders filled."""
    from qlshadow.i18n import translate
    text = translate(g.get("lang", "en"), message)
    return text % values if values else text


def _ngettext(singular: str, plural: str, n: int, **values) -> str:
    from qlshadow.i18n import translate_plural
    text = translate_plural(g.get("lang", "en"), singular, plural, n)
    return text % {"num": n, **values}


def _templates_speak(env) -> None:
    """Give the templates _() and {% trans %} (Jinja's i18n extension), on the first page:
    an idle server never makes its template environment."""
    if "jinja2.ext.InternationalizationExtension" in env.extensions:
        return
    env.policies["ext.i18n.trimmed"] = True
    env.add_extension("jinja2.ext.i18n")
    env.install_gettext_callables(_gettext, _ngettext, newstyle=True)


# Each page needs the scope its API needs (docs/CONTRACT.md §2.2): signing in takes
# auth.PAGE_SCOPE (`crons`: the crons, their health and the alert log); Runs, task logs,
# executions, accept failures and the gate need `runs`, as /open/runs and /open/reconcile do.
RUNS_SCOPE = "runs"


def _reads_runs() -> bool:
    return RUNS_SCOPE in g.scopes


def _lacks_runs(what: str):
    """The page's 403: what it shows needs the `runs` scope, which the viewer lacks."""
    return _render("missing.html", 403, title=_("Not allowed"),
                   what=_("{what} need the '{scope}' scope, which the app {app} does not "
                          "have.").format(what=what, scope=RUNS_SCOPE, app=g.viewer))


CHUNK = 16 * 1024  # characters of HTML handed to waitress at a time (bytes, for ASCII)


def _render(template: str, status: int = 200, **context):
    """The page as a stream of chunks of about CHUNK characters.

    Rendered whole, a 50-cron list is held three times at once (its pieces, one 155 KB str,
    its bytes) and the heap keeps that high-water mark after the page is sent; streamed, one
    chunk at a time is alive (docs/PERFORMANCE.md: 1.6 -> 1.1 MiB for the first list).
    """
    context.setdefault("viewer", g.get("viewer"))
    _templates_speak(current_app.jinja_env)
    zone = "UTC" if g.get("utc") else time.strftime("%Z")
    # A box that keeps UTC as its local time has no other zone to offer.
    local_is_utc = time.localtime().tm_gmtoff == 0 and time.strftime("%Z") in ("UTC", "GMT")
    pieces = stream_template(template, version=__version__, tz=zone, utc=g.get("utc"),
                             lang=g.get("lang", "en"),
                             zone_toggle=not local_is_utc or g.get("utc"), **context)
    return Response(_chunks(pieces), status, mimetype="text/html")


def _chunks(pieces):
    buffer, size = [], 0
    for piece in pieces:
        buffer.append(piece)
        size += len(piece)
        if size >= CHUNK:
            yield "".join(buffer).encode()
            buffer, size = [], 0
    if buffer:
        yield "".join(buffer).encode()


def _arg_int(name: str, default: int, lo: int, hi: int) -> int:
    """A query integer for a person: out of range or not a number falls back to the default."""
    raw = request.args.get(name, "")
    if raw.isascii() and raw.isdigit() and lo <= int(raw) <= hi:
        return int(raw)
    return default


def _shadow() -> bool:
    return current_app.extensions["qlshadow"].shadow_on


def _daemon() -> str | None:
    """The cron daemon whose firings the page judges (host/crond.py)."""
    from qlshadow.host.crond import kind_for
    return kind_for(current_app.extensions["qlshadow"])
