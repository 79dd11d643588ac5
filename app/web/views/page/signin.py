"""Signing in and out: the signed session cookie, the check every data view starts with
(login_required), and `/`, which sends a browser to the page."""
from __future__ import annotations

import functools
import os
import time

from flask import current_app, g, redirect, request, url_for

from qlshadow.core import auth
from qlshadow.errors import NotFound, Unavailable
from qlshadow.web.views.page.common import _, _render, bp

COOKIE = "qlshadow_page"
LIFETIME = 12 * 3600  # a session lasts half a day from sign-in, however busy


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
