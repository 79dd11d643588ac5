"""What every page request goes through: the host check (DNS rebinding), the language and
the zone chosen, the security headers; and the filters and globals the templates use."""
from __future__ import annotations

from flask import Response, current_app, g, request, url_for

from qlshadow import timefmt
from qlshadow.web.views.page.common import _, bp

LANG_COOKIE = "qlshadow_lang"  # the language chosen with ?lang=, for the links that follow
LANG_LIFETIME = 365 * 86400
# Accept-Language tags -> our languages; Werkzeug matches "zh-TW" or "zh-Hans-CN" to "zh".
_BROWSER_LANGS = {"en": "en", "zh-CN": "zh_CN", "zh": "zh_CN"}
# Plain self-contained pages: inline styles only, no scripts, no frames, no outside fetches.
SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; "
                                "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    "X-Content-Type-Options": "nosniff",
    # Nothing leaks to other sites; "no-referrer" would also make browsers send
    # "Origin: null" with the page's own forms, which the Origin check must refuse.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _page_hosts() -> frozenset:
    """Names the page answers at: `localhost`, this host's name and that name under `.lan`
    (OpenWrt's default domain), QL_HOST and QL_BASE_URL's host when they are names, and
    QL_PAGE_HOSTS. Any IP address is answered too (_own_host)."""
    names = current_app.extensions.get("qlshadow.page_hosts")
    if names is None:
        import socket
        from urllib.parse import urlsplit
        settings = current_app.extensions["qlshadow"]
        here = socket.gethostname().lower().rstrip(".")
        names = {"localhost", here, f"{here.partition('.')[0]}.lan",
                 *(host.lower() for host in settings.hosts),
                 (urlsplit(settings.base_url).hostname or "").rstrip("."), *settings.page_hosts}
        names = current_app.extensions["qlshadow.page_hosts"] = frozenset(names - {""})
    return names


def _host_name(host: str) -> str:
    """The name or address of a Host header, without its port, lowercase."""
    if host.startswith("["):
        return host[1:].partition("]")[0].lower()
    return host.rpartition(":")[0].lower().rstrip(".") if ":" in host else host.lower().rstrip(".")


@bp.before_request
def _own_host():
    """Refuse a page request that names another host (DNS rebinding: a site whose name was
    made to resolve to this box's address would otherwise get a signed-in page).

    A browser always sends the name from the URL, so an IP address is never a rebound name;
    a request without Host comes from no browser.
    """
    import ipaddress
    host = request.headers.get("Host")
    if host is None:
        return None
    name = _host_name(host)
    try:
        ipaddress.ip_address(name)
        return None
    except ValueError:
        pass
    if name in _page_hosts():
        return None
    text = (f"This page answers only at this box's own names and addresses, and {host[:100]!r} "
            "is not one of them; add the name to QL_PAGE_HOSTS to open the page there.\n")
    return Response(text, 421, mimetype="text/plain")


def _lang_of(raw: str | None) -> str | None:
    """Our language for a ?lang= or cookie value (en, zh_CN, zh-CN, zh), else None."""
    raw = (raw or "").strip().replace("-", "_").lower()
    return {"en": "en", "zh_cn": "zh_CN", "zh": "zh_CN"}.get(raw)


@bp.before_request
def _language():
    # ?lang= (then remembered), the cookie, the browser's languages, then QL_LANG. Set for
    # this request's context: reasons and labels computed in the view follow it too.
    chosen = _lang_of(request.args.get("lang"))
    g.lang_chosen = chosen
    lang = chosen or _lang_of(request.cookies.get(LANG_COOKIE))
    if lang is None:
        best = request.accept_languages.best_match(tuple(_BROWSER_LANGS))
        lang = _BROWSER_LANGS[best] if best else current_app.extensions["qlshadow"].lang
    g.lang = lang
    from qlshadow import i18n
    g.lang_token = i18n.use(lang)


@bp.teardown_request
def _language_done(exc=None):
    # Normally done by _headers, in the context the view ran in (a page streams later,
    # through g.lang); here only when the view raised.
    token = g.pop("lang_token", None)
    if token is not None:
        from qlshadow import i18n
        i18n.reset(token)


@bp.app_template_global("lang_toggle_url")
def _lang_toggle_url() -> str:
    """This page in the other language, the rest of its query kept."""
    args = {k: v for k, v in request.args.items() if k != "lang"}
    return url_for(request.endpoint, **(request.view_args or {}), **args,
                   lang="en" if g.get("lang") == "zh_CN" else "zh_CN")


@bp.after_request
def _headers(response):
    response.headers.update(SECURITY_HEADERS)
    _language_done()
    if g.get("lang_chosen"):
        response.set_cookie(LANG_COOKIE, g.lang_chosen, max_age=LANG_LIFETIME,
                            path=bp.url_prefix, httponly=True, samesite="Lax",
                            secure=request.is_secure)
    return response


@bp.before_request
def _zone_choice():
    # ?tz=utc shows every time in UTC; links made while it is on keep it (_keep_zone).
    g.utc = request.args.get("tz", "").lower() == "utc"


@bp.url_defaults
def _keep_zone(endpoint, values):
    if g.get("utc") and "tz" not in values:
        values["tz"] = "utc"


@bp.app_template_global("zone_toggle_url")
def _zone_toggle_url() -> str:
    """This page with the other zone and the rest of its query (e.g. page, size, before)."""
    args = {k: v for k, v in request.args.items() if k != "tz"}
    return url_for(request.endpoint, **(request.view_args or {}), **args,
                   tz="local" if g.get("utc") else "utc")


@bp.app_template_filter("when")
def _when(seconds, with_seconds: bool = False) -> str:
    """A time in the box's zone, the zone named (or in UTC on request); "—" for none."""
    if not seconds:
        return "—"
    if g.get("utc"):
        return timefmt.utc_text(seconds, with_seconds)
    return timefmt.local_text(seconds, with_seconds)


@bp.app_template_filter("duration")
def _duration(seconds) -> str:
    if seconds is None or seconds < 0:
        return "—"
    seconds = int(seconds)
    if seconds < 1:  # times are whole seconds: a run that began and ended in one
        return _("<1 s")
    if seconds < 60:
        return _("{s} s").format(s=seconds)
    if seconds < 3600:
        return _("{m} min {s} s").format(m=seconds // 60, s=seconds % 60)
    return _("{h} h {m} min").format(h=seconds // 3600, m=seconds % 3600 // 60)


@bp.app_template_filter("size")
def _size(count) -> str:
    from qlshadow.web import overview
    return overview.size_text(count)
