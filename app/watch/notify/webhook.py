"""The generic webhook channel: WEBHOOK_URL with its method, headers and a body made from
WEBHOOK_BODY's `key: value` lines (QingLong's format) as a form, JSON, multipart or text."""
from __future__ import annotations

import json
import secrets
import urllib.parse

from qlshadow.watch.notify.model import ChannelError
from qlshadow.watch.notify.request import FORM_TYPE, HttpRequest, form_body, json_body, need

WEBHOOK_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
WEBHOOK_CONTENT_TYPES = ("application/x-www-form-urlencoded", "application/json",
                         "multipart/form-data", "text/plain")


def webhook(values, title, content) -> HttpRequest:
    url = need(values, "WEBHOOK_URL")
    method = need(values, "WEBHOOK_METHOD", f" (one of {', '.join(WEBHOOK_METHODS)})").upper()
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
    headers = header_lines(values.get("WEBHOOK_HEADERS", ""))
    body = None
    if template.strip():
        body, content_type = webhook_body(template, media_type, content_type, title, content)
        if not any(name.lower() == "content-type" for name in headers):
            headers["Content-Type"] = content_type
    return HttpRequest(method, url, headers, body)


def header_lines(text: str) -> dict:
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


def substitute(value, title: str, content: str):
    if isinstance(value, str):
        return value.replace("$title", title).replace("$content", content)
    if isinstance(value, list):
        return [substitute(item, title, content) for item in value]
    if isinstance(value, dict):
        return {k: substitute(v, title, content) for k, v in value.items()}
    return value


def webhook_body(template: str, media_type: str, content_type: str, title: str,
                  content: str) -> tuple[bytes, str]:
    """The request body and its content type, from WEBHOOK_BODY (QingLong's format).

    text/plain sends the text with its placeholders replaced. Otherwise each `key: value`
    line is a field (a value that parses as JSON is that JSON, else a string; the first
    of a repeated key wins). Placeholders are replaced after the lines are parsed, so a
    message with line breaks stays inside its field.
    """
    if media_type == "text/plain":
        return substitute(template, title, content).encode("utf-8"), content_type
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
    fields = substitute(fields, title, content)
    if media_type == "application/json":
        return json_body(fields), content_type
    flat = {k: v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
            for k, v in fields.items()}
    if media_type == "multipart/form-data":
        boundary = secrets.token_hex(16)
        parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
                 for k, v in flat.items()]
        body = ("".join(parts) + f"--{boundary}--\r\n").encode("utf-8")
        return body, f"multipart/form-data; boundary={boundary}"
    return form_body(flat), content_type
