"""The channels of push services, which deliver to an app on a phone: ntfy, Gotify, Bark,
ServerChan, Push+, PushDeer, iGot, PushMe and WxPusher; each builds its request from the
settings with QingLong's variable names."""
from __future__ import annotations

import base64
import re
import urllib.parse

from qlshadow.watch.notify.model import ChannelError
from qlshadow.watch.notify.request import (FORM_TYPE, JSON_TYPE, HttpRequest, address, form_body,
                                           json_body, judge_json, judge_text, need, url_setting)


def _header_text(value: str) -> str:
    """A header value; non-ASCII text as an RFC 2047 encoded word (ntfy decodes it)."""
    if value.isascii():
        return value
    return "=?UTF-8?B?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="


NTFY_PRIORITIES = ("1", "2", "3", "4", "5", "min", "low", "default", "high", "urgent", "max")


def ntfy(values, title, content) -> HttpRequest:
    topic = need(values, "NTFY_TOPIC")
    base = address(values, "NTFY_URL", "https://ntfy.sh")
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
    return HttpRequest("POST", url, headers, content.encode("utf-8"))


def gotify(values, title, content) -> HttpRequest:
    base = address(values, "GOTIFY_URL", need(values, "GOTIFY_URL"))
    token = need(values, "GOTIFY_TOKEN")
    priority = values.get("GOTIFY_PRIORITY", "").strip() or "0"
    if not priority.isdigit():
        raise ChannelError(f"GOTIFY_PRIORITY={priority!r} is not a whole number")
    body = form_body({"title": title, "message": content, "priority": priority})
    # The token goes in Gotify's header rather than the URL, which proxies log.
    headers = {"Content-Type": FORM_TYPE, "X-Gotify-Key": token}
    return HttpRequest("POST", f"{base}/message", headers, body)


# Bark's optional variables and the JSON field each one fills.
BARK_FIELDS = {"BARK_ARCHIVE": "isArchive", "BARK_GROUP": "group", "BARK_SOUND": "sound",
               "BARK_ICON": "icon", "BARK_LEVEL": "level", "BARK_URL": "url"}


def bark(values, title, content) -> HttpRequest:
    push = need(values, "BARK_PUSH")
    if push.startswith(("http://", "https://")):
        url = push.rstrip("/")  # a self-hosted server's URL with the device key
    else:
        url = f"{address(values, 'BARK_ORIGIN', 'https://api.day.app')}/{urllib.parse.quote(push, safe='')}"
    data = {"title": title, "body": content}
    for key, name in BARK_FIELDS.items():
        if values.get(key, "").strip():
            data[name] = values[key].strip()
    return HttpRequest("POST", url, {"Content-Type": JSON_TYPE}, json_body(data),
                        judge_json(lambda r: r.get("code") == 200))


def serverchan(values, title, content) -> HttpRequest:
    key = need(values, "PUSH_KEY")
    # ServerChan³ keys (sctp<uid>t...) have their own host per user; the rest use Turbo's.
    own = re.match(r"sctp(\d+)t", key)
    default = f"https://{own.group(1)}.push.ft07.com" if own else "https://sctapi.ftqq.com"
    path = f"/send/{key}.send" if own else f"/{key}.send"
    url = address(values, "PUSH_KEY_ORIGIN", default) + urllib.parse.quote(path)
    # ServerChan renders Markdown: one line break would be lost, so each becomes two.
    body = form_body({"text": title, "desp": content.replace("\n", "\n\n")})

    def accepted(reply: dict) -> bool:
        data = reply.get("data")
        return (reply.get("code") == 0 or reply.get("errno") == 0
                or (isinstance(data, dict) and data.get("errno") == 0))
    return HttpRequest("POST", url, {"Content-Type": FORM_TYPE}, body, judge_json(accepted))


# Push+'s optional variables and the JSON field each one fills (PUSH_PLUS_USER: a group).
PUSH_PLUS_FIELDS = {"PUSH_PLUS_USER": "topic", "PUSH_PLUS_TEMPLATE": "template",
                    "PUSH_PLUS_CHANNEL": "channel", "PUSH_PLUS_WEBHOOK": "webhook",
                    "PUSH_PLUS_CALLBACKURL": "callbackUrl", "PUSH_PLUS_TO": "to"}


def pushplus(values, title, content) -> HttpRequest:
    data = {"token": need(values, "PUSH_PLUS_TOKEN"), "title": title, "content": content}
    for key, name in PUSH_PLUS_FIELDS.items():
        if values.get(key, "").strip():
            data[name] = values[key].strip()
    url = address(values, "PUSH_PLUS_ORIGIN", "https://www.pushplus.plus") + "/send"
    return HttpRequest("POST", url, {"Content-Type": JSON_TYPE}, json_body(data),
                        judge_json(lambda r: r.get("code") == 200))


def pushdeer(values, title, content) -> HttpRequest:
    url = url_setting(values, "DEER_URL", "https://api2.pushdeer.com/message/push")
    body = form_body({"text": title, "desp": content, "type": "markdown",
                       "pushkey": need(values, "DEER_KEY")})

    def accepted(reply: dict) -> bool:  # PushDeer lists what each device was sent
        result = reply.get("content")
        return isinstance(result, dict) and bool(result.get("result"))
    return HttpRequest("POST", url, {"Content-Type": FORM_TYPE}, body, judge_json(accepted))


def igot(values, title, content) -> HttpRequest:
    key = urllib.parse.quote(need(values, "IGOT_PUSH_KEY"), safe="")
    url = f"{address(values, 'IGOT_ORIGIN', 'https://push.hellyw.com')}/{key}"
    return HttpRequest("POST", url, {"Content-Type": FORM_TYPE},
                        form_body({"title": title, "content": content}),
                        judge_json(lambda r: r.get("ret") == 0))


def pushme(values, title, content) -> HttpRequest:
    url = url_setting(values, "PUSHME_URL", "https://push.i-i.me/")
    body = form_body({"push_key": need(values, "PUSHME_KEY"), "title": title,
                       "content": content, "date": "", "type": ""})
    return HttpRequest("POST", url, {"Content-Type": FORM_TYPE}, body, judge_text(b"success"))


def wxpusher(values, title, content) -> HttpRequest:
    import html  # small, and only this channel writes HTML

    token = need(values, "WXPUSHER_APP_TOKEN")
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
    url = address(values, "WXPUSHER_ORIGIN", "https://wxpusher.zjiecode.com") + "/api/send/message"
    return HttpRequest("POST", url, {"Content-Type": JSON_TYPE}, json_body(data),
                        judge_json(lambda r: r.get("code") == 1000))
