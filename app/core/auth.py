"""Apps, scopes and bearer tokens (no Flask).

Only SHA-256 hashes of tokens and client secrets are stored, so a leaked database lets no
one in. Tokens are found by their hash and the hash is compared in constant time.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time

from peewee import DatabaseError

from qlshadow.errors import Conflict, InvalidInput, Unavailable
from qlshadow.files import make_private, write_private
from qlshadow.storage import db
from qlshadow.storage.models import App, Token

TOKEN_LIFETIME = 30 * 24 * 3600
# Issuing a token keeps at most this many valid tokens per app (the newest): clients that
# fetch a token per run must not grow the table without bound. The system app's newest
# token is the one token.json holds, so it is always kept.
TOKENS_KEPT_PER_APP = 10
SYSTEM_APP = "system"
SYSTEM_SCOPES = ("crons", "runs")
# The runner app's token is what task.sh sends: it may post status callbacks and nothing
# else, so a token seen in a process list grants no cron creation and no reads.
RUNNER_APP = "qlshadow-runner"
RUNNER_SCOPES = ("status",)
RUNNER_TOKEN_FILE = "runner-token.json"
KNOWN_SCOPES = frozenset({"crons", "runs", "status", "metrics"})
# The scrape credential: `qlshadow token metrics` issues tokens of this app that never
# expire (a scrape must not stop silently after 30 days); `--revoke` deletes them all.
METRICS_APP = "qlshadow-metrics"
METRICS_SCOPES = ("metrics",)
NO_EXPIRY = 253402300799  # 9999-12-31 23:59:59 UTC, so every expiry check keeps working


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def create_app_record(name: str, scopes, now: int | None = None) -> tuple:
    """Create an app; returns (client_id, client_secret) — the secret is shown only once."""
    scopes = sorted(set(scopes))
    unknown = [s for s in scopes if s not in KNOWN_SCOPES]
    if unknown or not scopes:
        raise InvalidInput(f"scopes must be a comma list of {', '.join(sorted(KNOWN_SCOPES))}")
    client_id = secrets.token_hex(8)
    client_secret = secrets.token_urlsafe(24)
    App.insert(name=name, client_id=client_id, client_secret_hash=sha256_hex(client_secret),
               scopes=",".join(scopes), created_at=int(now or time.time())).execute()
    return client_id, client_secret


def ensure_system_app(database) -> None:
    """The system app exists after db init or the first serve (its secret is never needed).

    Its own write transaction on database: a write the database refuses (a full disk after
    an upgrade from a release without it) is one sentence, and nothing is written.
    """
    try:
        with database.connection_context(), db.write_transaction():
            _ensure_app(SYSTEM_APP, SYSTEM_SCOPES)
    except DatabaseError as exc:
        raise Unavailable(f"cannot create the system app: {db.failure_cause(exc)}; "
                          "the database is unchanged") from None


def _ensure_app(name: str, scopes) -> None:
    if App.select(App.id).where(App.name == name).exists():
        return
    create_app_record(name, scopes)


def issue_token(app_id: int, now: int) -> tuple:
    """A new 30-day token for an app; its expired and superseded tokens are deleted.

    Superseded: all but the app's newest TOKENS_KEPT_PER_APP - 1 older tokens, so with the
    new one the app holds at most TOKENS_KEPT_PER_APP.
    """
    Token.delete().where(Token.app == app_id, Token.expiration <= now).execute()
    kept = (Token.select(Token.token_hash).where(Token.app == app_id)
            .order_by(Token.expiration.desc(), Token.token_hash).limit(TOKENS_KEPT_PER_APP - 1))
    Token.delete().where(Token.app == app_id, Token.token_hash.not_in(kept)).execute()
    value = secrets.token_urlsafe(32)
    expiration = now + TOKEN_LIFETIME
    Token.insert(token_hash=sha256_hex(value), app=app_id, expiration=expiration).execute()
    return value, expiration


def app_for_credentials(client_id: str, client_secret: str):
    """The App row whose client id and secret match, or None."""
    app = App.get_or_none(App.client_id == client_id)
    # Compare even when the app is missing, so timing says nothing about which ids exist.
    stored = app.client_secret_hash if app else "0" * 64
    ok = hmac.compare_digest(stored, sha256_hex(client_secret))
    return app if (app and ok) else None


def token_scopes(token: str, now: int):
    """(scopes, expiration) of a valid token, or None when it is unknown or expired."""
    return scopes_for_digest(sha256_hex(token), now)


def scopes_for_digest(digest: str, now: int):
    """Like token_scopes, given the token's sha256 hex digest."""
    row = (Token.select(Token.token_hash, Token.expiration, App.scopes).join(App)
           .where(Token.token_hash == digest).tuples().first())
    if row is None or not hmac.compare_digest(row[0], digest) or row[1] <= now:
        return None
    return frozenset(row[2].split(",")), row[1]


def system_token(token_file: str, now: int | None = None, min_left: int = 24 * 3600) -> dict:
    """Return {"value", "expiration"} for the system app, reusing token.json while valid.

    A token in the file is reused only if the database still knows it and it has more
    than min_left seconds to live; otherwise a new one is issued and written (mode 0600).
    """
    return _app_token(SYSTEM_APP, SYSTEM_SCOPES, token_file, now, min_left)


def runner_token(data_dir: str, now: int | None = None, min_left: int = 24 * 3600) -> dict:
    """Like system_token, for the callback-only runner app, in runner-token.json."""
    return _app_token(RUNNER_APP, RUNNER_SCOPES, os.path.join(data_dir, RUNNER_TOKEN_FILE),
                      now, min_left)


def _app_token(name: str, scopes, token_file: str, now: int | None, min_left: int) -> dict:
    now = int(now or time.time())
    try:
        with open(token_file, encoding="utf-8") as fh:
            current = json.load(fh)
        value, expiration = current["value"], int(current["expiration"])
        known = token_scopes(value, now)
        if (known and known[1] == expiration and known[0] == frozenset(scopes)
                and expiration - now > min_left):
            make_private(token_file)  # reused as it is: whoever loosened it, it is 0600 again
            return {"value": value, "expiration": expiration}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    _ensure_app(name, scopes)
    app = App.get(App.name == name)
    if frozenset(app.scopes.split(",")) != frozenset(scopes):
        raise Conflict(f"an app named {name!r} already exists with scopes {app.scopes}, not "
                       f"{','.join(scopes)}: the name is reserved for qlshadow; delete that app "
                       "or create it again under another name")
    value, expiration = issue_token(app.id, now)
    token = {"value": value, "expiration": expiration}
    write_private(token_file, json.dumps(token) + "\n")
    return token


def issue_metrics_token() -> str:
    """A new metrics-only bearer token that does not expire; only its hash is stored."""
    _ensure_app(METRICS_APP, METRICS_SCOPES)
    app = App.get(App.name == METRICS_APP)
    if frozenset(app.scopes.split(",")) != frozenset(METRICS_SCOPES):
        raise ValueError(f"the app {METRICS_APP!r} has scopes {app.scopes}, not metrics; "
                         "rename or delete it")
    value = secrets.token_urlsafe(32)
    Token.insert(token_hash=sha256_hex(value), app=app.id, expiration=NO_EXPIRY).execute()
    return value


def revoke_metrics_tokens() -> int:
    """Delete every metrics token `qlshadow token metrics` issued; returns how many."""
    app = App.get_or_none(App.name == METRICS_APP)
    return Token.delete().where(Token.app == app.id).execute() if app else 0


PAGE_SCOPE = "crons"  # what an app needs to sign in to the status page
PAGE_KEY_FILE = "page.key"  # in the data dir: the page sessions' signing key


# --- status page sessions -------------------------------------------------------------------
# A session is one row of the tokens table: the app's, expiring with the session, whose hash
# is an HMAC of a random nonce under the page key. The cookie carries the nonce; without the
# key no one can turn it into the stored hash, so a session is never a bearer token for the
# API. Sign-in writes the row, sign-out deletes it (revoked on the server, whatever cookie
# copies exist), and deleting the app deletes it with the app's tokens. The cookie also
# carries a mark of the app's secret: a changed secret ends every session of the app. No
# new table, and nothing is written on a page view.

def _session_hash(key: bytes, nonce: str) -> str:
    return hmac.new(key, b"page session|" + nonce.encode(), hashlib.sha256).hexdigest()


def secret_mark(key: bytes, secret_hash: str) -> str:
    """A short keyed digest of an app's stored secret hash, carried by its session cookies."""
    return hmac.new(key, b"page secret|" + secret_hash.encode(), hashlib.sha256).hexdigest()[:32]


def open_session(key: bytes, app, lifetime: int, now: int) -> dict:
    """Store a new page session of app; returns the cookie's payload (write transaction)."""
    # The app's expired tokens and sessions go first: sign-ins never grow the table.
    Token.delete().where(Token.app == app.id, Token.expiration <= now).execute()
    nonce = secrets.token_urlsafe(24)
    Token.insert(token_hash=_session_hash(key, nonce), app=app.id,
                 expiration=now + lifetime).execute()
    return {"a": app.id, "n": nonce, "s": secret_mark(key, app.client_secret_hash)}


def close_session(key: bytes, nonce: str) -> int:
    """Delete a page session (sign-out); returns how many rows went (write transaction)."""
    return Token.delete().where(Token.token_hash == _session_hash(key, nonce)).execute()


def page_viewer(key: bytes, app_id: int, nonce: str, mark: str, token_digest: str | None,
                now: int) -> tuple | None:
    """(name, scopes) of the app a page session belongs to, while the session stands, else
    None.

    Checked on every page view: sign-out, an expired session, a changed secret, a deleted
    app, or (for a token sign-in) a deleted token or lost scope each end the session. The
    scopes are the app's as they are now: each page then needs what its API needs.
    """
    row = (Token.select(Token.expiration, App.id, App.name, App.scopes, App.client_secret_hash)
           .join(App).where(Token.token_hash == _session_hash(key, nonce)).tuples().first())
    if row is None or row[0] <= now or row[1] != app_id:
        return None
    scopes = frozenset(row[3].split(","))
    if PAGE_SCOPE not in scopes:
        return None
    if not hmac.compare_digest(secret_mark(key, row[4]), mark):
        return None
    if token_digest:
        found = scopes_for_digest(token_digest, now)
        if found is None or PAGE_SCOPE not in found[0]:
            return None
        scopes &= found[0]
    return row[2], scopes


def app_for_token(token: str, now: int):
    """The App row a valid bearer token belongs to, or None."""
    digest = sha256_hex(token)
    if scopes_for_digest(digest, now) is None:
        return None
    return App.select().join(Token).where(Token.token_hash == digest).first()


def page_key(path: str) -> bytes:
    """The page sessions' signing key: made once (0600) in the data dir, then only read.

    Created by linking a finished temp file into place, so two servers starting at once
    agree on one key and no one ever reads a half-written file.
    """
    try:
        with open(path, "rb") as fh:
            key = fh.read().strip()
        if len(key) >= 32:
            make_private(path)
            return key
    except FileNotFoundError:
        pass
    write_private(path, secrets.token_hex(32) + "\n", replace=False)
    with open(path, "rb") as fh:
        return fh.read().strip()




class TokenCache:
    """Bearer tokens looked up lately, keyed by their hash: one app's (held by its Runtime).

    A valid token needs no query on the callbacks of the next RECHECK seconds; after that it
    is looked up again, so a token row deleted to revoke it stops working within RECHECK
    seconds on every server. Bounded: cleared when full (apps and their tokens are few).
    """
    RECHECK = 60
    MAX = 256

    def __init__(self):
        self._known: dict = {}  # token hash -> (scopes, expiration, recheck_at)

    def scopes(self, token: str, now: int) -> frozenset | None:
        """The scopes of a valid token, or None when it is unknown or has expired."""
        digest = sha256_hex(token)  # the plaintext is never compared or stored
        known = self._known.get(digest)
        if known is None or known[2] <= now:
            found = scopes_for_digest(digest, now)
            if found is None:
                self._known.pop(digest, None)
                return None
            if len(self._known) >= self.MAX:
                self._known.clear()
            known = self._known[digest] = (*found, min(found[1], now + self.RECHECK))
        return known[0]
