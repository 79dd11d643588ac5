"""Notification channels, configured with QingLong's notify variable names (docs/NOTIFY.md).

Standard library only and no Flask: `qlshadow notify` imports this module, the callback
path never does. `send` makes one attempt with a short timeout and never raises for a
channel's failure; whoever calls it decides about retries. Every result leaves through
`send`, which cuts it to one line and scrubs the channel's secrets and every query string
from it, so no token or password reaches the notification log or a terminal.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import socket
import time
import urllib.parse
from dataclasses import dataclass, field
from collections.abc import Callable, Mapping

from qlshadow import config

DEFAULT_TIMEOUT = 5.0
# A channel's reply is read only to judge success and quote its first line.
REPLY_MAX_BYTES = 65536
REASON_MAX_CHARS = 200
# A same-origin redirect is followed this many times at most; one to another origin never.
MAX_REDIRECTS = 3
WEBHOOK_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
WEBHOOK_CONTENT_TYPES = ("application/x-www-form-urlencoded", "application/json",
                         "multipart/form-data", "text/plain")
MULTILINE_KEYS = config.NOTIFY_MULTILINE_KEYS
NEEDS_OPENSSL = ("needs the OpenWrt package python3-openssl "
                 "(opkg install python3-openssl / apk add python3-openssl)")


class ChannelError(Exception):
    """A channel's settings cannot be used; the message names the variable."""


@dataclass(frozen=True)
class Result:
    """One send attempt: ok, and a short reason (the HTTP status, or what went wrong)."""
    ok: bool
    reason: str


@dataclass(frozen=True)
class Channel:
    """A configured channel; `error` says why it cannot send (a setting is missing or bad)."""
    name: str
    values: Mapping[str, str] = field(repr=False)  # holds secrets: never in a repr
    timeout: float = DEFAULT_TIMEOUT
    error: str = ""
    # Where its settings came from: file paths, or config.ENVIRONMENT.
    sources: tuple = ()


@dataclass
class _HttpRequest:
    method: str
    url: str
    headers: dict
    body: bytes | None = None
    # Returns why a 2xx reply still means failure (an API's own error code), or None.
    judge: Callable[[bytes], str | None] = lambda body: None
    proxy: str | None = None
    # The next request, made from this one's accepted reply (a token fetched, then the
    # message sent with it), or None when this one was the last.
    follow: Callable[[bytes], _HttpRequest | None] | None = None
    # Texts the settings do not hold that a result must not show (a fetched token).
    hidden: tuple = ()


# --- settings -------------------------------------------------------------------------------

# The notification variables from the environment, the conf file and QL_NOTIFY_FILE
# (config reads them), with or without where each came from.
load_settings = config.notify_settings
load_sources = config.notify_sources


class _Reads(dict):
    """The settings, noting which ones a channel's builder read."""
    def __init__(self, values: Mapping[str, str]):
        super().__init__(values)
        self.read: set = set()

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)


def configured_channels(values: Mapping[str, str] | None = None,
                        origin: Mapping[str, str] | None = None) -> list[Channel]:
    """Every channel with one of its variables set, in a fixed order.

    A channel whose settings are incomplete or bad is listed too, with `error` set, so
    the operator hears about it instead of silently getting nothing.
    Raises config.ConfigError for a bad QL_NOTIFY_TIMEOUT.
    """
    values = load_settings() if values is None else dict(values)
    timeout = DEFAULT_TIMEOUT
    if values.get("QL_NOTIFY_TIMEOUT", "").strip():
        timeout = config._float("QL_NOTIFY_TIMEOUT", values["QL_NOTIFY_TIMEOUT"], 0.5, 120)
    channels = []
    for name, (triggers, build) in _CHANNELS.items():
        if not any(values.get(key, "").strip() for key in triggers):
            continue
        reads = _Reads(values)
        try:
            build(reads, "title", "content")  # validates the settings; nothing is sent
            error = ""
        except ChannelError as exc:
            error = str(exc)
        used = reads.read | {key for key in triggers if values.get(key, "").strip()}
        sources = sorted({origin[key] for key in used if key in (origin or {})})
        channels.append(Channel(name, values, timeout, error, tuple(sources)))
    return channels


def notes(sources: config.NotifySources) -> list[str]:
    """What `notify --test` says about the settings besides the channels: each line of
    QL_NOTIFY_FILE it could not read, each QingLong variable it does not use."""
    lines = [f"warning: {text}" for text in sources.warnings]
    for key in sorted(config.NOTIFY_UNUSED_KEYS & sources.values.keys()):
        lines.append(f"note: {key} (from {sources.origin[key]}) is a QingLong setting "
                     "qlshadow does not use")
    return lines


def skipped(values: Mapping[str, str], title: str) -> bool:
    """True when SKIP_PUSH_TITLE (one title a line, as in QingLong) lists this title."""
    return title in values.get("SKIP_PUSH_TITLE", "").splitlines()


def send(channel: Channel, title: str, content: str) -> Result:
    """Send one message through one channel, once; never raises for the channel's failure."""
    if channel.error:
        return Result(False, channel.error)
    if skipped(channel.values, title):
        return Result(True, "not sent: SKIP_PUSH_TITLE lists this title")
    try:
        prepared = _CHANNELS[channel.name][1](channel.values, title, content)
        needs_tls = prepared.use_ssl if channel.name == "smtp" else prepared.url.startswith("https:")
        if needs_tls:
            try:
                import ssl  # noqa: F401
            except ImportError:  # OpenWrt's python3-light lacks _ssl: say which package to add
                what = "SMTP over SSL" if channel.name == "smtp" else "https"
                return Result(False, f"{what} {NEEDS_OPENSSL}")
        if channel.name == "smtp":
            result = _send_smtp(prepared, title, content, channel.timeout)
        else:
            result = _send_http(prepared, channel.timeout)
    except ChannelError as exc:
        return Result(False, str(exc))
    except Exception as exc:  # a last resort: one channel's surprise must not stop the others
        return Result(False, f"unexpected error: {type(exc).__name__}")
    # The one place a result is composed from what the other side said: a receiver may
    # echo the request, and the result goes to the notification log and the terminal.
    return Result(result.ok, scrub(result.reason, channel.values, prepared))


def test_message() -> tuple[str, str]:
    """The title and content `qlshadow notify --test` sends."""
    from qlshadow.i18n import _
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    return ("qlshadow: " + _("test notification"),
            _("A test message from qlshadow on {host} at {when}.\nThis channel works.").format(
                host=socket.gethostname(), when=when))


# --- results --------------------------------------------------------------------------------

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


# --- transport ------------------------------------------------------------------------------

def _first_line(raw: bytes) -> str:
    # Not cut to REASON_MAX_CHARS here: a secret cut in two would escape the scrubbing.
    text = raw.decode("utf-8", "replace").strip()
    return text.splitlines()[0].strip() if text else "(empty body)"


def _network_reason(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s"
    detail = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return f"network error: {detail}"


def _send_http(request: _HttpRequest, timeout: float) -> Result:
    # Imported here: the notify tick runs every minute and mostly sends nothing, and these
    # (with ssl and email) are a good part of its start-up.
    import http.client
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        # Replaces the default handler, which would follow any redirect anywhere with the
        # headers (Authorization among them) and turn a POST into a GET without its body.
        # Declining leaves every 3xx to the default error handler: an HTTPError, below.
        def redirect_request(self, req, fp, code, msg, headers, newurl):
            return None

    # A proxy set for the channel replaces the environment's (http_proxy and the like),
    # which build_opener's default ProxyHandler reads otherwise.
    handlers = [NoRedirect()]
    if request.proxy:
        handlers.append(urllib.request.ProxyHandler({"http": request.proxy,
                                                     "https": request.proxy}))
    opener = urllib.request.build_opener(*handlers)
    url = request.url
    for _ in range(MAX_REDIRECTS + 1):
        outgoing = urllib.request.Request(url, data=request.body, headers=request.headers,
                                          method=request.method)
        try:
            with opener.open(outgoing, timeout=timeout) as reply:
                status, body = reply.status, reply.read(REPLY_MAX_BYTES)
            break
        except urllib.error.HTTPError as exc:
            with exc:
                if not 300 <= exc.code < 400:
                    return Result(False, f"HTTP {exc.code}: "
                                         f"{_first_line(exc.read(REPLY_MAX_BYTES))}")
                url, refused = _redirect(url, exc.headers.get("Location"), exc.code)
            if refused:
                return Result(False, refused)
        except urllib.error.URLError as exc:
            reason = exc.reason if isinstance(exc.reason, BaseException) else OSError(exc.reason)
            return Result(False, _network_reason(reason, timeout))
        except (OSError, http.client.HTTPException) as exc:
            return Result(False, _network_reason(exc, timeout))
    else:
        return Result(False, f"redirected more than {MAX_REDIRECTS} times")
    problem = request.judge(body)
    if problem is not None:
        return Result(False, f"HTTP {status}: {problem}")
    following = request.follow(body) if request.follow else None
    if following is not None:
        result = _send_http(following, timeout)
        reason = result.reason
        for text in following.hidden:
            if text:
                reason = reason.replace(text, MASK)
        return Result(result.ok, reason)
    return Result(True, f"HTTP {status}")


def _origin(url: str) -> tuple[tuple, str]:
    """(scheme, host, port) with the scheme's default port, and the origin as text."""
    parts = urllib.parse.urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    port = parts.port  # ValueError for a port that is not a number
    shown = f"[{host}]" if ":" in host else host
    text = f"{scheme}://{shown}" + (f":{port}" if port is not None else "")
    return (scheme, host, port or {"http": 80, "https": 443}.get(scheme)), text


def _redirect(url: str, location: str | None, code: int) -> tuple[str, str | None]:
    """Where a 3xx reply sends the same request next, or why it is not followed.

    Every 3xx is "repeat this request at the new address" (307/308 semantics, also for
    301/302/303): a receiver that moved keeps getting the method, body and headers.
    """
    if not location:
        return url, f"HTTP {code}: a redirect without a Location"
    target = urllib.parse.urljoin(url, location.strip())
    try:
        (here, _), (there, shown) = _origin(url), _origin(target)
    except ValueError:
        return url, f"HTTP {code}: a redirect to a malformed Location refused"
    if there != here:
        return url, f"redirect to another origin refused: {shown}"
    return target, None


def _judge_json(accept: Callable[[dict], bool]) -> Callable[[bytes], str | None]:
    """A judge for APIs that report their own error code in a JSON object on a 2xx reply."""
    def judge(body: bytes) -> str | None:
        try:
            reply = json.loads(body)
        except ValueError:
            return f"not a JSON reply: {_first_line(body)}"
        return None if isinstance(reply, dict) and accept(reply) else _first_line(body)
    return judge


def _json_body(data: dict) -> bytes:
    return json.dumps(data, ensure_ascii=False).encode("utf-8")


def _form_body(data: dict) -> bytes:
    return urllib.parse.urlencode(data).encode("ascii")


JSON_TYPE = "application/json; charset=utf-8"
FORM_TYPE = "application/x-www-form-urlencoded"


def _base(values: Mapping[str, str], key: str, default: str) -> str:
    """A channel's public address, or its override (a loopback receiver in tests)."""
    base = (values.get(key, "").strip() or default).rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise ChannelError(f"{key} must start with http:// or https://")
    return base


def _need(values: Mapping[str, str], key: str, why: str = "") -> str:
    value = values.get(key, "").strip()
    if not value:
        raise ChannelError(f"{key} is not set{why}")
    return value


def _text(title: str, content: str) -> str:
    return f"{title}\n\n{content}"


# --- channels -------------------------------------------------------------------------------

def _webhook(values, title, content) -> _HttpRequest:
    url = _need(values, "WEBHOOK_URL")
    method = _need(values, "WEBHOOK_METHOD", f" (one of {', '.join(WEBHOOK_METHODS)})").upper()
    if method not in WEBHOOK_METHODS:
        raise ChannelError(f"WEBHOOK_METHOD={method!r} must be one of {', '.join(WEBHOOK_METHODS)}")
    template = values.get("WEBHOOK_BODY", "")
    if not any(p in url or p in template for p in ("$title", "$content")):
        raise ChannelError("WEBHOOK_URL or WEBHOOK_BODY must contain $title or $content")
    content_type = values.get("WEBHOOK_CONTENT_TYPE", "").strip() or FORM_TYPE
    media_type = content_type.split(";")[0].strip().lower()
    if media_type not in WEBHOOK_CONTENT_TYPES:
        raise ChannelError(f"WEBHOOK_CONTENT_TYPE={content_type!r} must be one of "
                           f"{', '.join(WEBHOOK_CONTENT_TYPES)}")
    url = (url.replace("$title", urllib.parse.quote_plus(title))
           .replace("$content", urllib.parse.quote_plus(content)))
    if not url.startswith(("http://", "https://")):
        raise ChannelError("WEBHOOK_URL must start with http:// or https://")
    headers = _header_lines(values.get("WEBHOOK_HEADERS", ""))
    body = None
    if template.strip():
        body, content_type = _webhook_body(template, media_type, content_type, title, content)
        if not any(name.lower() == "content-type" for name in headers):
            headers["Content-Type"] = content_type
    return _HttpRequest(method, url, headers, body)


def _header_lines(text: str) -> dict:
    """`Key: value` lines; a repeated key's values are joined with ', ' (one HTTP header)."""
    headers: dict = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        name = name.strip()
        if not sep or not name:
            continue
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


def _substitute(value, title: str, content: str):
    if isinstance(value, str):
        return value.replace("$title", title).replace("$content", content)
    if isinstance(value, list):
        return [_substitute(item, title, content) for item in value]
    if isinstance(value, dict):
        return {k: _substitute(v, title, content) for k, v in value.items()}
    return value


def _webhook_body(template: str, media_type: str, content_type: str, title: str,
                  content: str) -> tuple[bytes, str]:
    """The request body and its content type, from WEBHOOK_BODY (QingLong's format).

    text/plain sends the text with its placeholders replaced. Otherwise each `key: value`
    line is a field (a value that parses as JSON is that JSON, else a string; the first
    of a repeated key wins). Placeholders are replaced after the lines are parsed, so a
    message with line breaks stays inside its field.
    """
    if media_type == "text/plain":
        return _substitute(template, title, content).encode("utf-8"), content_type
    fields: dict = {}
    for line in template.splitlines():
        key, sep, raw = line.partition(":")
        key = key.strip()
        if not sep or not key or key in fields:
            continue
        raw = raw.strip()
        try:
            fields[key] = json.loads(raw)
        except ValueError:
            fields[key] = raw
    fields = _substitute(fields, title, content)
    if media_type == "application/json":
        return _json_body(fields), content_type
    flat = {k: v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
            for k, v in fields.items()}
    if media_type == "multipart/form-data":
        boundary = secrets.token_hex(16)
        parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
                 for k, v in flat.items()]
        body = ("".join(parts) + f"--{boundary}--\r\n").encode("utf-8")
        return body, f"multipart/form-data; boundary={boundary}"
    return _form_body(flat), content_type


def _header_text(value: str) -> str:
    """A header value; non-ASCII text as an RFC 2047 encoded word (ntfy decodes it)."""
    if value.isascii():
        return value
    return "=?UTF-8?B?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="


NTFY_PRIORITIES = ("1", "2", "3", "4", "5", "min", "low", "default", "high", "urgent", "max")


def _ntfy(values, title, content) -> _HttpRequest:
    topic = _need(values, "NTFY_TOPIC")
    base = _base(values, "NTFY_URL", "https://ntfy.sh")
    priority = values.get("NTFY_PRIORITY", "").strip() or "3"
    if priority not in NTFY_PRIORITIES:
        raise ChannelError(f"NTFY_PRIORITY={priority!r} must be 1 to 5")
    headers = {"Title": _header_text(title), "Priority": priority,
               "Content-Type": "text/plain; charset=utf-8"}
    if values.get("NTFY_TOKEN", "").strip():
        headers["Authorization"] = "Bearer " + values["NTFY_TOKEN"].strip()
    elif values.get("NTFY_USERNAME", "").strip() and values.get("NTFY_PASSWORD", ""):
        pair = f"{values['NTFY_USERNAME'].strip()}:{values['NTFY_PASSWORD']}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
    if values.get("NTFY_ACTIONS", "").strip():
        headers["Actions"] = _header_text(values["NTFY_ACTIONS"].strip())
    url = f"{base}/{urllib.parse.quote(topic, safe='')}"
    return _HttpRequest("POST", url, headers, content.encode("utf-8"))


def _gotify(values, title, content) -> _HttpRequest:
    base = _base(values, "GOTIFY_URL", _need(values, "GOTIFY_URL"))
    token = _need(values, "GOTIFY_TOKEN")
    priority = values.get("GOTIFY_PRIORITY", "").strip() or "0"
    if not priority.isdigit():
        raise ChannelError(f"GOTIFY_PRIORITY={priority!r} is not a whole number")
    body = _form_body({"title": title, "message": content, "priority": priority})
    # The token goes in Gotify's header rather than the URL, which proxies log.
    headers = {"Content-Type": FORM_TYPE, "X-Gotify-Key": token}
    return _HttpRequest("POST", f"{base}/message", headers, body)


# Bark's optional variables and the JSON field each one fills.
BARK_FIELDS = {"BARK_ARCHIVE": "isArchive", "BARK_GROUP": "group", "BARK_SOUND": "sound",
               "BARK_ICON": "icon", "BARK_LEVEL": "level", "BARK_URL": "url"}


def _bark(values, title, content) -> _HttpRequest:
    push = _need(values, "BARK_PUSH")
    if push.startswith(("http://", "https://")):
        url = push.rstrip("/")  # a self-hosted server's URL with the device key
    else:
        url = f"{_base(values, 'BARK_ORIGIN', 'https://api.day.app')}/{urllib.parse.quote(push, safe='')}"
    data = {"title": title, "body": content}
    for key, name in BARK_FIELDS.items():
        if values.get(key, "").strip():
            data[name] = values[key].strip()
    return _HttpRequest("POST", url, {"Content-Type": JSON_TYPE}, _json_body(data),
                        _judge_json(lambda r: r.get("code") == 200))


def _telegram(values, title, content) -> _HttpRequest:
    token = _need(values, "TG_BOT_TOKEN")
    chat = _need(values, "TG_USER_ID")
    host = values.get("TG_API_HOST", "").strip() or "https://api.telegram.org"
    if not host.startswith(("http://", "https://")):
        host = "https://" + host  # QingLong's JS notify takes a bare host name here
    url = f"{host.rstrip('/')}/bot{token}/sendMessage"
    proxy = None
    proxy_host = values.get("TG_PROXY_HOST", "").strip()
    proxy_port = values.get("TG_PROXY_PORT", "").strip()
    if proxy_host or proxy_port:
        if not proxy_host or not proxy_port.isdigit():
            raise ChannelError("TG_PROXY_HOST and TG_PROXY_PORT (a number) must be set together")
        auth = values.get("TG_PROXY_AUTH", "").strip()
        if auth and "@" not in proxy_host:
            proxy_host = f"{auth}@{proxy_host}"
        proxy = f"http://{proxy_host}:{proxy_port}"
    body = _form_body({"chat_id": chat, "text": _text(title, content),
                       "disable_web_page_preview": "true"})
    return _HttpRequest("POST", url, {"Content-Type": FORM_TYPE}, body,
                        _judge_json(lambda r: r.get("ok") is True), proxy)


def _serverchan(values, title, content) -> _HttpRequest:
    key = _need(values, "PUSH_KEY")
    # ServerChan³ keys (sctp<uid>t...) have their own host per user; the rest use Turbo's.
    own = re.match(r"sctp(\d+)t", key)
    default = f"https://{own.group(1)}.push.ft07.com" if own else "https://sctapi.ftqq.com"
    path = f"/send/{key}.send" if own else f"/{key}.send"
    url = _base(values, "PUSH_KEY_ORIGIN", default) + urllib.parse.quote(path)
    # ServerChan renders Markdown: one line break would be lost, so each becomes two.
    body = _form_body({"text": title, "desp": content.replace("\n", "\n\n")})

    def accepted(reply: dict) -> bool:
        data = reply.get("data")
        return (reply.get("code") == 0 or reply.get("errno") == 0
                or (isinstance(data, dict) and data.get("errno") == 0))
    return _HttpRequest("POST", url, {"Content-Type": FORM_TYPE}, body, _judge_json(accepted))


# Push+'s optional variables and the JSON field each one fills (PUSH_PLUS_USER: a group).
PUSH_PLUS_FIELDS = {"PUSH_PLUS_USER": "topic", "PUSH_PLUS_TEMPLATE": "template",
                    "PUSH_PLUS_CHANNEL": "channel", "PUSH_PLUS_WEBHOOK": "webhook",
                    "PUSH_PLUS_CALLBACKURL": "callbackUrl", "PUSH_PLUS_TO": "to"}


def _pushplus(values, title, content) -> _HttpRequest:
    data = {"token": _need(values, "PUSH_PLUS_TOKEN"), "title": title, "content": content}
    for key, name in PUSH_PLUS_FIELDS.items():
        if values.get(key, "").strip():
            data[name] = values[key].strip()
    url = _base(values, "PUSH_PLUS_ORIGIN", "https://www.pushplus.plus") + "/send"
    return _HttpRequest("POST", url, {"Content-Type": JSON_TYPE}, _json_body(data),
                        _judge_json(lambda r: r.get("code") == 200))


def _wecom(values, title, content) -> _HttpRequest:
    key = urllib.parse.quote(_need(values, "QYWX_KEY"), safe="")
    url = f"{_base(values, 'QYWX_ORIGIN', 'https://qyapi.weixin.qq.com')}/cgi-bin/webhook/send?key={key}"
    body = _json_body({"msgtype": "text", "text": {"content": _text(title, content)}})
    return _HttpRequest("POST", url, {"Content-Type": JSON_TYPE}, body,
                        _judge_json(lambda r: r.get("errcode") == 0))


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    """DingTalk's signature: base64 HMAC-SHA256 of "timestamp\\nsecret" keyed by the secret."""
    digest = hmac.new(secret.encode("utf-8"), f"{timestamp_ms}\n{secret}".encode(),
                      hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def _dingtalk(values, title, content) -> _HttpRequest:
    token = urllib.parse.quote(_need(values, "DD_BOT_TOKEN"), safe="")
    url = f"{_base(values, 'DD_BOT_ORIGIN', 'https://oapi.dingtalk.com')}/robot/send?access_token={token}"
    secret = values.get("DD_BOT_SECRET", "").strip()
    if secret:  # a robot with "signing" on rejects unsigned requests; without it, none needed
        now = int(time.time() * 1000)
        url += f"&timestamp={now}&sign={urllib.parse.quote_plus(dingtalk_sign(secret, now))}"
    body = _json_body({"msgtype": "text", "text": {"content": _text(title, content)}})
    return _HttpRequest("POST", url, {"Content-Type": JSON_TYPE}, body,
                        _judge_json(lambda r: r.get("errcode") == 0))


def feishu_sign(secret: str, timestamp: int) -> str:
    """Feishu's signature: base64 HMAC-SHA256 of nothing, keyed by "timestamp\\nsecret"."""
    key = f"{timestamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode("ascii")


def _feishu(values, title, content) -> _HttpRequest:
    key = urllib.parse.quote(_need(values, "FSKEY"), safe="")
    url = f"{_base(values, 'FSKEY_ORIGIN', 'https://open.feishu.cn')}/open-apis/bot/v2/hook/{key}"
    data: dict = {"msg_type": "text", "content": {"text": _text(title, content)}}
    secret = values.get("FSSECRET", "").strip()
    if secret:
        now = int(time.time())
        data.update(timestamp=str(now), sign=feishu_sign(secret, now))
    return _HttpRequest("POST", url, {"Content-Type": JSON_TYPE}, _json_body(data),
                        _judge_json(lambda r: r.get("code") == 0 or r.get("StatusCode") == 0))


@dataclass(frozen=True)
class _SmtpSettings:
    host: str
    port: int
    use_ssl: bool
    email: str
    password: str = field(repr=False)
    name: str


def _smtp(values, title, content) -> _SmtpSettings:
    server = _need(values, "SMTP_SERVER", " (host:port)")
    ssl_text = values.get("SMTP_SSL", "").strip().lower() or "false"
    if ssl_text not in ("true", "false"):
        raise ChannelError(f"SMTP_SSL={values['SMTP_SSL']!r} must be true or false")
    use_ssl = ssl_text == "true"
    email = _need(values, "SMTP_EMAIL")
    host, sep, port = server.rpartition(":")
    if not sep:
        host, port = server, ("465" if use_ssl else "25")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ChannelError(f"SMTP_SERVER={server!r} must be host:port")
    return _SmtpSettings(host.strip("[]"), int(port), use_ssl, email,
                         values.get("SMTP_PASSWORD", ""), values.get("SMTP_NAME", "").strip())


def _send_smtp(settings: _SmtpSettings, title: str, content: str, timeout: float) -> Result:
    import smtplib  # only this channel needs the mail modules
    from email.message import EmailMessage
    from email.utils import formataddr

    message = EmailMessage()
    message["Subject"] = title
    # As in QingLong: from the account to itself.
    message["From"] = message["To"] = formataddr((settings.name, settings.email))
    message.set_content(content)
    connect = smtplib.SMTP_SSL if settings.use_ssl else smtplib.SMTP
    try:
        with connect(settings.host, settings.port, timeout=timeout) as server:
            if settings.password:
                server.login(settings.email, settings.password)
            server.send_message(message)
    except smtplib.SMTPRecipientsRefused as exc:
        code, text = next(iter(exc.recipients.values()))
        return Result(False, f"SMTP {code}: {_first_line(text)}")
    except smtplib.SMTPResponseException as exc:
        return Result(False, f"SMTP {exc.smtp_code}: {_first_line(exc.smtp_error)}")
    except smtplib.SMTPException as exc:
        return Result(False, f"SMTP error: {_first_line(str(exc).encode())}")
    except OSError as exc:
        return Result(False, _network_reason(exc, timeout))
    return Result(True, "SMTP accepted")


def _url(values: Mapping[str, str], key: str, default: str = "") -> str:
    """A full URL setting (a path and query of its own), checked like an origin."""
    url = values.get(key, "").strip() or default
    if not url:
        raise ChannelError(f"{key} is not set")
    if not url.startswith(("http://", "https://")):
        raise ChannelError(f"{key} must start with http:// or https://")
    return url


def _judge_text(expected: bytes) -> Callable[[bytes], str | None]:
    return lambda body: None if body.strip() == expected else _first_line(body)


def _pushdeer(values, title, content) -> _HttpRequest:
    url = _url(values, "DEER_URL", "https://api2.pushdeer.com/message/push")
    body = _form_body({"text": title, "desp": content, "type": "markdown",
                       "pushkey": _need(values, "DEER_KEY")})

    def accepted(reply: dict) -> bool:  # PushDeer lists what each device was sent
        result = reply.get("content")
        return isinstance(result, dict) and bool(result.get("result"))
    return _HttpRequest("POST", url, {"Content-Type": FORM_TYPE}, body, _judge_json(accepted))


GOBOT_TARGET = re.compile(r"(user_id|group_id)=(\d+)")


def _gobot(values, title, content) -> _HttpRequest:
    url = _url(values, "GOBOT_URL")
    target = GOBOT_TARGET.fullmatch(_need(values, "GOBOT_QQ"))
    if target is None:
        raise ChannelError("GOBOT_QQ must be user_id=<QQ> (send_private_msg) or "
                           "group_id=<group> (send_group_msg)")
    # As QingLong sends it: a GET with everything in the query.
    query = {}
    if values.get("GOBOT_TOKEN", "").strip():
        query["access_token"] = values["GOBOT_TOKEN"].strip()
    query[target.group(1)] = target.group(2)
    query["message"] = _text(title, content)
    joiner = "&" if "?" in url else "?"
    return _HttpRequest("GET", url + joiner + urllib.parse.urlencode(query), {}, None,
                        _judge_json(lambda r: r.get("status") == "ok"))


def _igot(values, title, content) -> _HttpRequest:
    key = urllib.parse.quote(_need(values, "IGOT_PUSH_KEY"), safe="")
    url = f"{_base(values, 'IGOT_ORIGIN', 'https://push.hellyw.com')}/{key}"
    return _HttpRequest("POST", url, {"Content-Type": FORM_TYPE},
                        _form_body({"title": title, "content": content}),
                        _judge_json(lambda r: r.get("ret") == 0))


def _chat(values, title, content) -> _HttpRequest:
    # Synology Chat's incoming webhook: CHAT_URL ends where the token goes (…&token=).
    url = _url(values, "CHAT_URL") + _need(values, "CHAT_TOKEN")
    payload = json.dumps({"text": f"{title}\n{content}"}, ensure_ascii=False)
    return _HttpRequest("POST", url, {"Content-Type": FORM_TYPE}, _form_body({"payload": payload}),
                        _judge_json(lambda r: r.get("success") is True))


def _weplus(values, title, content) -> _HttpRequest:
    data = {"token": _need(values, "WE_PLUS_BOT_TOKEN"), "title": title, "content": content,
            # As QingLong: a long message goes as HTML, which WePlus does not cut.
            "template": "html" if len(content) > 800 else "txt",
            "receiver": values.get("WE_PLUS_BOT_RECEIVER", "").strip(),
            "version": values.get("WE_PLUS_BOT_VERSION", "").strip() or "pro"}
    url = _base(values, "WE_PLUS_BOT_ORIGIN", "https://www.weplusbot.com") + "/send"
    return _HttpRequest("POST", url, {"Content-Type": JSON_TYPE}, _json_body(data),
                        _judge_json(lambda r: r.get("code") == 200))


def _qmsg(values, title, content) -> _HttpRequest:
    key = urllib.parse.quote(_need(values, "QMSG_KEY"), safe="")
    kind = _need(values, "QMSG_TYPE", " (send, or group for a QQ group)")
    if kind not in ("send", "group"):
        raise ChannelError(f"QMSG_TYPE={kind!r} must be send or group")
    url = f"{_base(values, 'QMSG_ORIGIN', 'https://qmsg.zendee.cn')}/{kind}/{key}"
    # Qmsg reads "----" as its own separator; QingLong shortens it the same way.
    msg = _text(title, content).replace("----", "-")
    return _HttpRequest("POST", url, {"Content-Type": FORM_TYPE}, _form_body({"msg": msg}),
                        _judge_json(lambda r: r.get("code") == 0))


def _wecom_app(values, title, content) -> _HttpRequest:
    parts = [part.strip() for part in _need(values, "QYWX_AM").split(",")]
    if len(parts) not in (4, 5) or not all(parts[:4]):
        raise ChannelError("QYWX_AM must be corpid,corpsecret,touser,agentid[,media_id]")
    corpid, corpsecret, touser, agentid = parts[:4]
    media = parts[4] if len(parts) == 5 else ""
    origin = _base(values, "QYWX_ORIGIN", "https://qyapi.weixin.qq.com")
    # media_id as QingLong's notify.js reads it: empty or 1, text; 0, a text card; any
    # other, a picture message (mpnews) with that picture.
    if media in ("", "1"):
        message = {"msgtype": "text", "text": {"content": _text(title, content)}}
    elif media == "0":
        message = {"msgtype": "textcard", "textcard": {
            "title": title, "description": content,
            "url": "https://github.com/whyour/qinglong", "btntxt": "more"}}
    else:
        message = {"msgtype": "mpnews", "mpnews": {"articles": [{
            "title": title, "thumb_media_id": media, "author": "qlshadow",
            "content_source_url": "", "content": content.replace("\n", "<br/>"),
            "digest": content}]}}
    message.update(touser=touser, agentid=agentid, safe="0")
    query = urllib.parse.urlencode({"corpid": corpid, "corpsecret": corpsecret})

    def send_with(reply: bytes) -> _HttpRequest:
        token = str(json.loads(reply).get("access_token") or "")
        url = f"{origin}/cgi-bin/message/send?access_token={urllib.parse.quote(token, safe='')}"
        return _HttpRequest("POST", url, {"Content-Type": JSON_TYPE}, _json_body(message),
                            _judge_json(lambda r: r.get("errcode") == 0), hidden=(token,))
    # Two requests: the token (valid two hours; fetched for each message, as QingLong
    # does, since nothing here lives that long), then the message.
    return _HttpRequest("GET", f"{origin}/cgi-bin/gettoken?{query}", {}, None,
                        _judge_json(lambda r: r.get("errcode", 0) == 0
                                    and bool(r.get("access_token"))), follow=send_with)


def _aibotk(values, title, content) -> _HttpRequest:
    key = _need(values, "AIBOTK_KEY")
    kind = _need(values, "AIBOTK_TYPE", " (room or contact)")
    name = _need(values, "AIBOTK_NAME")
    if kind not in ("room", "contact"):
        raise ChannelError(f"AIBOTK_TYPE={kind!r} must be room or contact")
    data = {"apiKey": key, "roomName" if kind == "room" else "name": name,
            "message": {"type": 1, "content": _text(title, content)}}
    url = f"{_base(values, 'AIBOTK_ORIGIN', 'https://api-bot.aibotk.com')}/openapi/v1/chat/{kind}"
    return _HttpRequest("POST", url, {"Content-Type": JSON_TYPE}, _json_body(data),
                        _judge_json(lambda r: r.get("code") == 0))


def _pushme(values, title, content) -> _HttpRequest:
    url = _url(values, "PUSHME_URL", "https://push.i-i.me/")
    body = _form_body({"push_key": _need(values, "PUSHME_KEY"), "title": title,
                       "content": content, "date": "", "type": ""})
    return _HttpRequest("POST", url, {"Content-Type": FORM_TYPE}, body, _judge_text(b"success"))


def _chronocat(values, title, content) -> _HttpRequest:
    base = _base(values, "CHRONOCAT_URL", _need(values, "CHRONOCAT_URL"))
    token = _need(values, "CHRONOCAT_TOKEN")
    qq = _need(values, "CHRONOCAT_QQ", " (user_id=<QQ>;group_id=<group>)")
    peers = [(1, uin) for uin in re.findall(r"user_id=(\d+)", qq)]
    peers += [(2, uin) for uin in re.findall(r"group_id=(\d+)", qq)]
    if not peers:
        raise ChannelError("CHRONOCAT_QQ must name user_id=<QQ> or group_id=<group>")
    headers = {"Content-Type": JSON_TYPE, "Authorization": f"Bearer {token}"}

    def request(index: int) -> _HttpRequest:
        kind, uin = peers[index]
        body = _json_body({"peer": {"chatType": kind, "peerUin": uin},
                           "elements": [{"elementType": 1,
                                         "textElement": {"content": _text(title, content)}}]})
        following = (lambda reply: request(index + 1)) if index + 1 < len(peers) else None
        return _HttpRequest("POST", f"{base}/api/message/send", headers, body, follow=following)
    # One request for each user and group, in turn; the first refusal ends the message.
    return request(0)


def _wxpusher(values, title, content) -> _HttpRequest:
    import html  # small, and only this channel writes HTML

    token = _need(values, "WXPUSHER_APP_TOKEN")
    topics = [t.strip() for t in values.get("WXPUSHER_TOPIC_IDS", "").split(";") if t.strip()]
    uids = [u.strip() for u in values.get("WXPUSHER_UIDS", "").split(";") if u.strip()]
    if not topics and not uids:
        raise ChannelError("WXPUSHER_TOPIC_IDS or WXPUSHER_UIDS must be set (';' between ids)")
    if not all(t.isdigit() for t in topics):
        raise ChannelError("WXPUSHER_TOPIC_IDS must be numbers separated by ';'")
    text = (f"<h1>{html.escape(title)}</h1><br/>"
            f"<div style='white-space: pre-wrap;'>{html.escape(content)}</div>")
    data = {"appToken": token, "content": text, "summary": title[:99], "contentType": 2,
            "topicIds": [int(t) for t in topics], "uids": uids, "verifyPayType": 0}
    url = _base(values, "WXPUSHER_ORIGIN", "https://wxpusher.zjiecode.com") + "/api/send/message"
    return _HttpRequest("POST", url, {"Content-Type": JSON_TYPE}, _json_body(data),
                        _judge_json(lambda r: r.get("code") == 1000))


# name -> (variables that switch the channel on, builder). The order is the send order.
_CHANNELS: dict = {
    "webhook": (("WEBHOOK_URL", "WEBHOOK_METHOD"), _webhook),
    "ntfy": (("NTFY_TOPIC",), _ntfy),
    "gotify": (("GOTIFY_URL", "GOTIFY_TOKEN"), _gotify),
    "bark": (("BARK_PUSH",), _bark),
    "telegram": (("TG_BOT_TOKEN", "TG_USER_ID"), _telegram),
    "serverchan": (("PUSH_KEY",), _serverchan),
    "pushplus": (("PUSH_PLUS_TOKEN",), _pushplus),
    "wecom": (("QYWX_KEY",), _wecom),
    "dingtalk": (("DD_BOT_TOKEN", "DD_BOT_SECRET"), _dingtalk),
    "feishu": (("FSKEY",), _feishu),
    "smtp": (("SMTP_SERVER", "SMTP_EMAIL"), _smtp),
    "pushdeer": (("DEER_KEY",), _pushdeer),
    "gobot": (("GOBOT_URL", "GOBOT_QQ"), _gobot),
    "igot": (("IGOT_PUSH_KEY",), _igot),
    "chat": (("CHAT_URL", "CHAT_TOKEN"), _chat),
    "weplus": (("WE_PLUS_BOT_TOKEN",), _weplus),
    "qmsg": (("QMSG_KEY",), _qmsg),
    "wecom_app": (("QYWX_AM",), _wecom_app),
    "aibotk": (("AIBOTK_KEY",), _aibotk),
    "pushme": (("PUSHME_KEY",), _pushme),
    "chronocat": (("CHRONOCAT_URL", "CHRONOCAT_TOKEN"), _chronocat),
    "wxpusher": (("WXPUSHER_APP_TOKEN",), _wxpusher),
}
CHANNEL_NAMES = tuple(_CHANNELS)
