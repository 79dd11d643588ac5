"""The status page: read-only HTML rendered on the server, behind a signed session cookie.

No JavaScript is needed; nothing is fetched from outside (routers are often offline). The
session cookie is signed with a key kept in the data dir, so sessions survive restarts;
each session is also stored on the server (auth.open_session), so sign-out, a changed
secret or a deleted app end it whatever copies of the cookie exist.
"""
from __future__ import annotations

import functools
import os
import time

from flask import (Blueprint, Response, current_app, g, redirect, request, stream_template,
                   url_for)

from qlshadow import __version__, timefmt
from qlshadow.core import auth
from qlshadow.errors import NotFound, Unavailable
from qlshadow.parse import INT64_MAX

bp = Blueprint("page", __name__, url_prefix="/page")
# What the pages show (overview, health, the Run reader) is imported by the view that shows
# it: a server nobody opens a page on never loads it (about 0.3 MiB of an idle router's RSS).
COOKIE = "qlshadow_page"
LANG_COOKIE = "qlshadow_lang"  # the language chosen with ?lang=, for the links that follow
LANG_LIFETIME = 365 * 86400
# Accept-Language tags -> our languages; Werkzeug matches "zh-TW" or "zh-Hans-CN" to "zh".
_BROWSER_LANGS = {"en": "en", "zh-CN": "zh_CN", "zh": "zh_CN"}
LIFETIME = 12 * 3600  # a session lasts half a day from sign-in, however busy
PAGE_SIZES = (20, 50, 100, 200)
RUNS_LIMIT = 50
GATE_DAYS = 7
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


def _serializer():
    """The cookie signer, made on the first page request (the key file is read once).

    Unavailable (a 503, never a 500) when the key file can be neither read nor written,
    e.g. on a full disk before the first sign-in.
    """
    signer = current_app.extensions.get("qlshadow.page")
    if signer is None:
        from itsdangerous import URLSafeTimedSerializer  # loaded with Flask already
        settings = current_app.extensions["qlshadow"]
        path = os.path.join(settings.data_dir, auth.PAGE_KEY_FILE)
        try:
            key = auth.page_key(path)
        except OSError as exc:
            raise Unavailable(f"The status page's signing key {path} cannot be written "
                              f"({exc.strerror or exc}); free some space (qlshadow prune) "
                              "and sign in again.") from None
        signer = URLSafeTimedSerializer(key, salt="qlshadow page session")
        # Sessions are stored under an HMAC with the same key (auth.open_session).
        current_app.extensions["qlshadow.page_key"] = key
        current_app.extensions["qlshadow.page"] = signer
    return signer


def _page_key() -> bytes:
    """The key the cookie signer was made with (after _serializer())."""
    return current_app.extensions["qlshadow.page_key"]


def _session() -> dict | None:
    """The cookie's verified payload {"a", "n", "s", "t"?}, or None (missing, forged, expired)."""
    from itsdangerous import BadData
    raw = request.cookies.get(COOKIE)
    if not raw:
        return None
    try:
        data = _serializer().loads(raw, max_age=LIFETIME)
        if not (type(data["a"]) is int and isinstance(data["n"], str)
                and isinstance(data["s"], str)):
            return None
        return data
    except (BadData, KeyError, TypeError, ValueError, Unavailable):
        return None


def _viewer() -> tuple | None:
    """(name, scopes) of the signed-in app, or None for a missing, forged, expired or revoked
    session."""
    data = _session()
    if data is None:
        return None
    return auth.page_viewer(_page_key(), data["a"], data["n"], data["s"],
                            data.get("t") or None, int(time.time()))


def _foreign_origin() -> str | None:
    """Why a POST comes from another site's page (its Origin or Referer), else None.

    Browsers send Origin with every cross-site POST; a request with neither header comes
    from no web page (curl, a script), which has no cookie of a victim to abuse.
    """
    from urllib.parse import urlsplit
    origin = request.headers.get("Origin")
    source = origin if origin is not None else request.headers.get("Referer")
    if source is None:
        return None
    if source == "null" or urlsplit(source).netloc.lower() != request.host.lower():
        return _("This form was sent from another site ({source}); open the page here and "
                 "retry.").format(source=source[:100])
    return None


def _limiter():
    from qlshadow.web.ratelimit import signin_limiter
    return signin_limiter(current_app.extensions)


def login_required(view):
    """No data without a valid session: anything else goes to the sign-in form."""
    @functools.wraps(view)
    def wrapper(*args, **kwargs):
        found = _viewer()
        if found is None:
            response = redirect(url_for("page.login"), code=303)
            if request.cookies.get(COOKIE):
                response.delete_cookie(COOKIE, path=bp.url_prefix)
            return response
        g.viewer, g.scopes = found
        return view(*args, **kwargs)
    return wrapper


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


def _(message: str) -> str:
    """A sentence in the page's language, also while the page streams after its view has
    returned (the translation module loads with the first page)."""
    from qlshadow.i18n import current, translate
    return translate(g.get("lang") or current(), message)


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


@bp.route("/login", methods=["GET"])
def login():
    return _render("login.html")


@bp.route("/login", methods=["POST"])
def login_submit():
    from qlshadow.web.ratelimit import client_key
    client_id = request.form.get("client_id", "").strip()
    foreign = _foreign_origin()
    if foreign:
        return _render("login.html", 403, error=foreign, client_id=client_id)
    address = client_key(request.remote_addr)
    wait = _limiter().retry_after(address)
    if wait:
        response = _render("login.html", 429, client_id=client_id,
                           error=_("Too many failed sign-ins from this address; try again in "
                                   "{wait} s.").format(wait=wait))
        response.headers["Retry-After"] = str(wait)
        return response
    secret = request.form.get("client_secret", "")
    token = request.form.get("token", "").strip()
    now = int(time.time())
    found, digest = None, None
    if token:
        found = auth.app_for_token(token, now)
        digest = auth.sha256_hex(token)
    elif client_id and secret and "\x00" not in client_id:
        found = auth.app_for_credentials(client_id, secret)
    if found is None or auth.PAGE_SCOPE not in found.scopes.split(","):
        if token or client_id:
            _limiter().failed(address)
        message = (_("Enter a client id and secret, or a token.") if not (token or client_id)
                   else _("Those credentials are wrong, or their app lacks the '{scope}' "
                          "scope.").format(scope=auth.PAGE_SCOPE))
        return _render("login.html", 401, error=message, client_id=client_id)
    try:
        signer = _serializer()
    except Unavailable as exc:
        return _render("login.html", 503, error=exc.message, client_id=client_id)
    from qlshadow.storage.db import write_transaction
    with write_transaction():
        payload = auth.open_session(_page_key(), found, LIFETIME, now)
    if digest:
        payload["t"] = digest
    value = signer.dumps(payload)
    response = redirect(url_for("page.crons_page"), code=303)
    response.set_cookie(COOKIE, value, max_age=LIFETIME, path=bp.url_prefix, httponly=True,
                        samesite="Strict", secure=request.is_secure)
    return response


@bp.route("/logout", methods=["POST"])
def logout():
    foreign = _foreign_origin()
    if foreign:
        return _render("login.html", 403, error=foreign)
    data = _session()
    if data is not None:  # ended on the server: a copy of the cookie no longer works
        from qlshadow.storage.db import write_transaction
        with write_transaction():
            auth.close_session(_page_key(), data["n"])
    response = redirect(url_for("page.login"), code=303)
    response.delete_cookie(COOKIE, path=bp.url_prefix, httponly=True, samesite="Strict")
    return response


def _shadow() -> bool:
    return current_app.extensions["qlshadow"].shadow_on


def _daemon() -> str | None:
    """The cron daemon whose firings the page judges (host/crond.py)."""
    from qlshadow.host.crond import kind_for
    return kind_for(current_app.extensions["qlshadow"])


def root():
    """`/`: a browser goes to the page (which asks for sign-in first); anything else gets
    the JSON answer every unknown path gets."""
    wanted = {value for value, quality in request.accept_mimetypes if quality > 0}
    if wanted & {"text/html", "application/xhtml+xml"}:  # named, not matched by */*
        return redirect(url_for("page.crons_page"), code=303)
    raise NotFound("No such endpoint; the status page is at /page/.")


# `/` lives outside the page's prefix; registered from here so the page owns it.
bp.record_once(lambda state: state.app.add_url_rule("/", "page.root", root,
                                                    methods=["GET"]))


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


@bp.route("/gate", methods=["GET"])
@login_required
def gate_page():
    if not _reads_runs():
        return _lacks_runs(_("The gate's verdicts"))
    try:
        # The gate is its own module; without it the page still works and says so.
        from qlshadow.watch.reconcile import reconcile
    except ImportError:
        return _render("gate.html", gate=None)
    now = int(time.time())
    data = reconcile(now - GATE_DAYS * 86400, now, now=now, daemon=_daemon())
    failing = [c for c in data.get("crons", []) if c.get("verdict") != "pass"]
    passing = [c for c in data.get("crons", []) if c.get("verdict") == "pass"]
    return _render("gate.html", gate=data, crons=failing + passing, days=GATE_DAYS)


NOTIFICATIONS = 50  # rows of the notification log on the health page


@bp.route("/health", methods=["GET"])
@login_required
def health_page():
    from qlshadow.web import overview
    from qlshadow.web.views.health import health
    # The same document /health answers, whatever keys it has grown.
    answer = health()
    data = answer.get_json() if hasattr(answer, "get_json") else answer
    data = data.get("data", data) if isinstance(data, dict) else {}
    rows = overview.health_rows(data, _when)
    from qlshadow.core.fleet import hosts_listing
    from qlshadow.storage.db import is_sqlite
    hosts = hosts_listing(one_host=is_sqlite())  # shown for a fleet: two hosts or more
    return _render("health.html", rows=rows, hosts=hosts if len(hosts) > 1 else [],
                   notifications=overview.notification_log(NOTIFICATIONS))
