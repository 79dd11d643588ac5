"""The channels of chat bots, which post into a chat or a group: Telegram, WeCom (a group's
robot and an app), DingTalk, Feishu, go-cqhttp, Synology Chat, WePlus, Qmsg, Aibotk and
Chronocat; each builds its request from the settings with QingLong's variable names."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
import urllib.parse

from qlshadow.watch.notify.model import ChannelError
from qlshadow.watch.notify.request import (FORM_TYPE, JSON_TYPE, HttpRequest, address, form_body,
                                           json_body, judge_json, message_text, need, url_setting)


def telegram(values, title, content) -> HttpRequest:
    token = need(values, "TG_BOT_TOKEN")
    chat_id = need(values, "TG_USER_ID")
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
    body = form_body({"chat_id": chat_id, "text": message_text(title, content),
                       "disable_web_page_preview": "true"})
    return HttpRequest("POST", url, {"Content-Type": FORM_TYPE}, body,
                        judge_json(lambda r: r.get("ok") is True), proxy)


def wecom(values, title, content) -> HttpRequest:
    key = urllib.parse.quote(need(values, "QYWX_KEY"), safe="")
    url = f"{address(values, 'QYWX_ORIGIN', 'https://qyapi.weixin.qq.com')}/cgi-bin/webhook/send?key={key}"
    body = json_body({"msgtype": "text", "text": {"content": message_text(title, content)}})
    return HttpRequest("POST", url, {"Content-Type": JSON_TYPE}, body,
                        judge_json(lambda r: r.get("errcode") == 0))


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    """DingTalk's signature: base64 HMAC-SHA256 of "timestamp\\nsecret" keyed by the secret."""
    digest = hmac.new(secret.encode("utf-8"), f"{timestamp_ms}\n{secret}".encode(),
                      hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def dingtalk(values, title, content) -> HttpRequest:
    token = urllib.parse.quote(need(values, "DD_BOT_TOKEN"), safe="")
    url = f"{address(values, 'DD_BOT_ORIGIN', 'https://oapi.dingtalk.com')}/robot/send?access_token={token}"
    secret = values.get("DD_BOT_SECRET", "").strip()
    if secret:  # a robot with "signing" on rejects unsigned requests; without it, none needed
        now = int(time.time() * 1000)
        url += f"&timestamp={now}&sign={urllib.parse.quote_plus(dingtalk_sign(secret, now))}"
    body = json_body({"msgtype": "text", "text": {"content": message_text(title, content)}})
    return HttpRequest("POST", url, {"Content-Type": JSON_TYPE}, body,
                        judge_json(lambda r: r.get("errcode") == 0))


def feishu_sign(secret: str, timestamp: int) -> str:
    """Feishu's signature: base64 HMAC-SHA256 of nothing, keyed by "timestamp\\nsecret"."""
    key = f"{timestamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode("ascii")


def feishu(values, title, content) -> HttpRequest:
    key = urllib.parse.quote(need(values, "FSKEY"), safe="")
    url = f"{address(values, 'FSKEY_ORIGIN', 'https://open.feishu.cn')}/open-apis/bot/v2/hook/{key}"
    data: dict = {"msg_type": "text", "content": {"text": message_text(title, content)}}
    secret = values.get("FSSECRET", "").strip()
    if secret:
        now = int(time.time())
        data.update(timestamp=str(now), sign=feishu_sign(secret, now))
    return HttpRequest("POST", url, {"Content-Type": JSON_TYPE}, json_body(data),
                        judge_json(lambda r: r.get("code") == 0 or r.get("StatusCode") == 0))


GOBOT_TARGET = re.compile(r"(user_id|group_id)=(\d+)")


def gobot(values, title, content) -> HttpRequest:
    url = url_setting(values, "GOBOT_URL")
    target = GOBOT_TARGET.fullmatch(need(values, "GOBOT_QQ"))
    if target is None:
        raise ChannelError("GOBOT_QQ must be user_id=<QQ> (send_private_msg) or "
                           "group_id=<group> (send_group_msg)")
    # As QingLong sends it: a GET with everything in the query.
    query = {}
    if values.get("GOBOT_TOKEN", "").strip():
        query["access_token"] = values["GOBOT_TOKEN"].strip()
    query[target.group(1)] = target.group(2)
    query["message"] = message_text(title, content)
    joiner = "&" if "?" in url else "?"
    return HttpRequest("GET", url + joiner + urllib.parse.urlencode(query), {}, None,
                        judge_json(lambda r: r.get("status") == "ok"))


def chat(values, title, content) -> HttpRequest:
    # Synology Chat's incoming webhook: CHAT_URL ends where the token goes (…&token=).
    url = url_setting(values, "CHAT_URL") + need(values, "CHAT_TOKEN")
    payload = json.dumps({"text": f"{title}\n{content}"}, ensure_ascii=False)
    return HttpRequest("POST", url, {"Content-Type": FORM_TYPE}, form_body({"payload": payload}),
                        judge_json(lambda r: r.get("success") is True))


def weplus(values, title, content) -> HttpRequest:
    data = {"token": need(values, "WE_PLUS_BOT_TOKEN"), "title": title, "content": content,
            # As QingLong: a long message goes as HTML, which WePlus does not cut.
            "template": "html" if len(content) > 800 else "txt",
            "receiver": values.get("WE_PLUS_BOT_RECEIVER", "").strip(),
            "version": values.get("WE_PLUS_BOT_VERSION", "").strip() or "pro"}
    url = address(values, "WE_PLUS_BOT_ORIGIN", "https://www.weplusbot.com") + "/send"
    return HttpRequest("POST", url, {"Content-Type": JSON_TYPE}, json_body(data),
                        judge_json(lambda r: r.get("code") == 200))


def qmsg(values, title, content) -> HttpRequest:
    key = urllib.parse.quote(need(values, "QMSG_KEY"), safe="")
    kind = need(values, "QMSG_TYPE", " (send, or group for a QQ group)")
    if kind not in ("send", "group"):
        raise ChannelError(f"QMSG_TYPE={kind!r} must be send or group")
    url = f"{address(values, 'QMSG_ORIGIN', 'https://qmsg.zendee.cn')}/{kind}/{key}"
    # Qmsg reads "----" as its own separator; QingLong shortens it the same way.
    msg = message_text(title, content).replace("----", "-")
    return HttpRequest("POST", url, {"Content-Type": FORM_TYPE}, form_body({"msg": msg}),
                        judge_json(lambda r: r.get("code") == 0))


def wecom_app(values, title, content) -> HttpRequest:
    parts = [part.strip() for part in need(values, "QYWX_AM").split(",")]
    if len(parts) not in (4, 5) or not all(parts[:4]):
        raise ChannelError("QYWX_AM must be corpid,corpsecret,touser,agentid[,media_id]")
    corpid, corpsecret, touser, agentid = parts[:4]
    media = parts[4] if len(parts) == 5 else ""
    origin = address(values, "QYWX_ORIGIN", "https://qyapi.weixin.qq.com")
    # media_id as QingLong's notify.js reads it: empty or 1, text; 0, a text card; any
    # other, a picture message (mpnews) with that picture.
    if media in ("", "1"):
        message = {"msgtype": "text", "text": {"content": message_text(title, content)}}
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

    def send_with(reply: bytes) -> HttpRequest:
        token = str(json.loads(reply).get("access_token") or "")
        url = f"{origin}/cgi-bin/message/send?access_token={urllib.parse.quote(token, safe='')}"
        return HttpRequest("POST", url, {"Content-Type": JSON_TYPE}, json_body(message),
                            judge_json(lambda r: r.get("errcode") == 0), hidden=(token,))
    # Two requests: the token (valid two hours; fetched for each message, as QingLong
    # does, since nothing here lives that long), then the message.
    return HttpRequest("GET", f"{origin}/cgi-bin/gettoken?{query}", {}, None,
                        judge_json(lambda r: r.get("errcode", 0) == 0
                                    and bool(r.get("access_token"))), follow=send_with)


def aibotk(values, title, content) -> HttpRequest:
    key = need(values, "AIBOTK_KEY")
    kind = need(values, "AIBOTK_TYPE", " (room or contact)")
    name = need(values, "AIBOTK_NAME")
    if kind not in ("room", "contact"):
        raise ChannelError(f"AIBOTK_TYPE={kind!r} must be room or contact")
    data = {"apiKey": key, "roomName" if kind == "room" else "name": name,
            "message": {"type": 1, "content": message_text(title, content)}}
    url = f"{address(values, 'AIBOTK_ORIGIN', 'https://api-bot.aibotk.com')}/openapi/v1/chat/{kind}"
    return HttpRequest("POST", url, {"Content-Type": JSON_TYPE}, json_body(data),
                        judge_json(lambda r: r.get("code") == 0))


def chronocat(values, title, content) -> HttpRequest:
    base = address(values, "CHRONOCAT_URL", need(values, "CHRONOCAT_URL"))
    token = need(values, "CHRONOCAT_TOKEN")
    qq = need(values, "CHRONOCAT_QQ", " (user_id=<QQ>;group_id=<group>)")
    peers = [(1, uin) for uin in re.findall(r"user_id=(\d+)", qq)]
    peers += [(2, uin) for uin in re.findall(r"group_id=(\d+)", qq)]
    if not peers:
        raise ChannelError("CHRONOCAT_QQ must name user_id=<QQ> or group_id=<group>")
    headers = {"Content-Type": JSON_TYPE, "Authorization": f"Bearer {token}"}

    def request(index: int) -> HttpRequest:
        kind, uin = peers[index]
        body = json_body({"peer": {"chatType": kind, "peerUin": uin},
                           "elements": [{"elementType": 1,
                                         "textElement": {"content": message_text(title, content)}}]})
        following = (lambda reply: request(index + 1)) if index + 1 < len(peers) else None
        return HttpRequest("POST", f"{base}/api/message/send", headers, body, follow=following)
    # One request for each user and group, in turn; the first refusal ends the message.
    return request(0)
