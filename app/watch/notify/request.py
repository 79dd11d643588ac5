"""An HTTP channel's request (HttpRequest), and the helpers its builders share: reading a
required setting or an address, making a form or JSON body, judging an API's own reply."""
from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from qlshadow.watch.notify.model import ChannelError

JSON_TYPE = "application/json; charset=utf-8"
FORM_TYPE = "application/x-www-form-urlencoded"


@dataclass
class HttpRequest:
    """What an HTTP channel sends, and how its reply is judged."""
    method: str
    url: str
    headers: dict
    body: bytes | None = None
    # Returns why a 2xx reply still means failure (an API's own error code), or None.
    judge: Callable[[bytes], str | None] = lambda body: None
    proxy: str | None = None
    # The next request, made from this one's accepted reply (a token fetched, then the
    # message sent with it), or None when this one was the last.
    follow: Callable[[bytes], HttpRequest | None] | None = None
    # Texts the settings do not hold that a result must not show (a fetched token).
    hidden: tuple = ()


def first_line(raw: bytes) -> str:
    # Not cut to REASON_MAX_CHARS here: a secret cut in two would escape the scrubbing.
    text = raw.decode("utf-8", "replace").strip()
    return text.splitlines()[0].strip() if text else "(empty body)"


def judge_json(accept: Callable[[dict], bool]) -> Callable[[bytes], str | None]:
    """A judge for APIs that report their own error code in a JSON object on a 2xx reply."""
    def judge(body: bytes) -> str | None:
        try:
            reply = json.loads(body)
        except ValueError:
            return f"not a JSON reply: {first_line(body)}"
        return None if isinstance(reply, dict) and accept(reply) else first_line(body)
    return judge


def judge_text(expected: bytes) -> Callable[[bytes], str | None]:
    return lambda body: None if body.strip() == expected else first_line(body)


def json_body(data: dict) -> bytes:
    return json.dumps(data, ensure_ascii=False).encode("utf-8")


def form_body(data: dict) -> bytes:
    return urllib.parse.urlencode(data).encode("ascii")



def address(values: Mapping[str, str], key: str, default: str) -> str:
    """A channel's public address, or its override (a loopback receiver in tests)."""
    base = (values.get(key, "").strip() or default).rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise ChannelError(f"{key} must start with http:// or https://")
    return base


def need(values: Mapping[str, str], key: str, why: str = "") -> str:
    value = values.get(key, "").strip()
    if not value:
        raise ChannelError(f"{key} is not set{why}")
    return value


def message_text(title: str, content: str) -> str:
    return f"{title}\n\n{content}"


def url_setting(values: Mapping[str, str], key: str, default: str = "") -> str:
    """A full URL setting (a path and query of its own), checked like an origin."""
    url = values.get(key, "").strip() or default
    if not url:
        raise ChannelError(f"{key} is not set")
    if not url.startswith(("http://", "https://")):
        raise ChannelError(f"{key} must start with http:// or https://")
    return url
