"""What a result may show: one line, cut short, with no secret of the channel's settings, no
credential header sent and no query string, for the notification log and the terminal."""
from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping

REASON_MAX_CHARS = 200


# Settings whose values are not secret; every other value is, a new channel's too.
_PUBLIC_KEYS = frozenset({
    "QL_NOTIFY_TIMEOUT", "WEBHOOK_METHOD", "WEBHOOK_CONTENT_TYPE", "NTFY_PRIORITY",
    "GOTIFY_PRIORITY", "SMTP_SERVER", "SMTP_SSL", "TG_PROXY_PORT", "BARK_ARCHIVE",
    "BARK_GROUP", "BARK_SOUND", "BARK_ICON", "BARK_LEVEL", "PUSH_PLUS_TEMPLATE",
    "PUSH_PLUS_CHANNEL", "QMSG_TYPE", "AIBOTK_TYPE", "WE_PLUS_BOT_VERSION", "SKIP_PUSH_TITLE",
    "QL_NOTIFY_FILE", "HITOKOTO", "CONSOLE",
})
# Shorter values are not hidden: masking every "1" or "ops" would garble the reason, and
# a secret that short is no secret.
SECRET_MIN_CHARS = 4
# Headers built from the settings that carry credentials (a Basic pair, a Bearer token).
_CREDENTIAL_HEADER = re.compile(r"auth|key|token|secret|sign|cookie|pass", re.IGNORECASE)
_QUERY = re.compile(r"\?[^\s\"'<>]+")
MASK = "***"


def _secret_texts(values: Mapping[str, str], request=None) -> list[str]:
    """Every text that would give a secret away, longest first."""
    found: set = set()

    def add(text: str, words: bool = False) -> None:
        text = text.strip()
        if len(text) < SECRET_MIN_CHARS:
            return
        # As written, and as a URL or a form would carry it.
        found.update({text, urllib.parse.quote(text, safe=""), urllib.parse.quote_plus(text)})
        if words:  # "Bearer <token>": the token alone is echoed too
            for word in text.split():
                add(word)

    for key, value in values.items():
        if key in _PUBLIC_KEYS:
            continue
        if "://" in value:  # an address: its origin is not secret, the rest may be
            parts = urllib.parse.urlsplit(value.strip())
            userinfo = parts.netloc.rpartition("@")[0]
            for text in (userinfo, *userinfo.split(":", 1), parts.path):
                add(text)
            for _, text in urllib.parse.parse_qsl(parts.query):
                add(text)
            continue
        add(value)
        add(value.rpartition("@")[0])  # user:password@host
        for part in re.split(r"[,;]", value):  # QYWX_AM's corpsecret, a list of ids
            add(part)
            add(part.partition("=")[2])
        for line in value.splitlines():  # WEBHOOK_HEADERS and WEBHOOK_BODY: key: value lines
            add(line)
            add(line.partition(":")[2], words=True)
    for name, value in getattr(request, "headers", {}).items():
        if _CREDENTIAL_HEADER.search(name):
            add(value, words=True)
    return sorted(found, key=len, reverse=True)


def scrub(reason: str, values: Mapping[str, str], request=None) -> str:
    """A reason fit for a log: one line, no secret of the channel's, no query string."""
    lines = reason.strip().splitlines()
    text = lines[0].strip() if lines else ""
    texts = _secret_texts(values, request)
    if texts:
        text = re.sub("|".join(map(re.escape, texts)), MASK, text)
    text = _QUERY.sub("?" + MASK, text)
    return text[:REASON_MAX_CHARS]
