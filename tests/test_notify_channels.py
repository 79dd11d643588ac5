"""Notification channels (docs/NOTIFY.md): each channel's exact request against a real
receiver on 127.0.0.1, SMTP against a small SMTP server written here, failures reported
and never raised, the conf file and the environment, and `qlshadow notify --test`."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import socketserver
import subprocess
import sys
import threading
import urllib.parse
from email import message_from_bytes, policy
from email.header import decode_header, make_header
from email.parser import BytesParser

import pytest

from qlshadow import config
from qlshadow.watch import notify
from qlshadow.cli import main
from helpers import ROOT
from receivers import PROXY_VARIABLES

TITLE = "Cron 7 failed"
CONTENT = "exit 2\nlast line: disk full & more"






def _only(values: dict) -> notify.Channel:
    channels = notify.configured_channels(values)
    assert len(channels) == 1, channels
    return channels[0]


def _send(values: dict, title: str = TITLE, content: str = CONTENT) -> notify.Result:
    return notify.send(_only(values), title, content)


def _json(request: dict) -> dict:
    return json.loads(request["body"].decode("utf-8"))


def _form(request: dict) -> dict:
    return dict(urllib.parse.parse_qsl(request["body"].decode("ascii"), keep_blank_values=True))


# --- webhook (QingLong's custom notification) -----------------------------------------------

def test_webhook_sends_json_fields_with_the_placeholders_replaced(receiver):
    result = _send({"WEBHOOK_URL": receiver.url + "/hook", "WEBHOOK_METHOD": "POST",
                    "WEBHOOK_CONTENT_TYPE": "application/json",
                    "WEBHOOK_BODY": 'title: $title\ncontent: $content\npriority: 5\n'
                                    'extra: {"tag": "$title"}'})

    request = receiver.last
    assert result == notify.Result(True, "HTTP 200")
    assert (request["method"], request["path"]) == ("POST", "/hook")
    assert request["headers"]["content-type"] == "application/json"
    assert _json(request) == {"title": TITLE, "content": CONTENT, "priority": 5,
                              "extra": {"tag": TITLE}}


def test_webhook_placeholders_in_the_url_are_url_encoded(receiver):
    result = _send({"WEBHOOK_URL": receiver.url + "/push?t=$title&c=$content",
                    "WEBHOOK_METHOD": "get"})

    request = receiver.last
    assert result.ok and request["method"] == "GET" and request["body"] == b""
    path, _, query = request["path"].partition("?")
    assert path == "/push"
    assert query == f"t={urllib.parse.quote_plus(TITLE)}&c={urllib.parse.quote_plus(CONTENT)}"
    assert urllib.parse.parse_qs(query) == {"t": [TITLE], "c": [CONTENT]}


def test_webhook_body_is_a_form_by_default(receiver):
    _send({"WEBHOOK_URL": receiver.url, "WEBHOOK_METHOD": "PUT",
           "WEBHOOK_BODY": "text: $title\ndesp: $content\ntext: ignored, the first one wins"})

    request = receiver.last
    assert request["method"] == "PUT"
    assert request["headers"]["content-type"] == "application/x-www-form-urlencoded"
    assert _form(request) == {"text": TITLE, "desp": CONTENT}


def test_webhook_text_plain_sends_the_body_as_written(receiver):
    _send({"WEBHOOK_URL": receiver.url, "WEBHOOK_METHOD": "POST",
           "WEBHOOK_CONTENT_TYPE": "text/plain", "WEBHOOK_BODY": "[$title] $content"})

    assert receiver.last["headers"]["content-type"] == "text/plain"
    assert receiver.last["body"].decode() == f"[{TITLE}] {CONTENT}"


def test_webhook_multipart_form_carries_each_field(receiver):
    _send({"WEBHOOK_URL": receiver.url, "WEBHOOK_METHOD": "POST",
           "WEBHOOK_CONTENT_TYPE": "multipart/form-data",
           "WEBHOOK_BODY": "title: $title\ncontent: $content"})

    request = receiver.last
    raw = (f"Content-Type: {request['headers']['content-type']}\r\n\r\n").encode() + request["body"]
    parts = BytesParser(policy=policy.HTTP).parsebytes(raw).iter_parts()
    fields = {part.get_param("name", header="content-disposition"): part.get_content()
              for part in parts}
    assert fields == {"title": TITLE, "content": CONTENT}


def test_webhook_headers_are_key_value_lines_and_a_repeated_key_is_joined(receiver):
    _send({"WEBHOOK_URL": receiver.url + "/$title", "WEBHOOK_METHOD": "POST",
           "WEBHOOK_HEADERS": "Authorization: Bearer s3cret\nX-Tag: a\nX-Tag: b\nnot a header"})

    headers = receiver.last["headers"]
    assert headers["authorization"] == "Bearer s3cret"
    assert headers["x-tag"] == "a, b"


@pytest.mark.parametrize("values, reason", [
    ({"WEBHOOK_URL": "http://127.0.0.1:9/$title"}, "WEBHOOK_METHOD is not set"),
    ({"WEBHOOK_URL": "http://127.0.0.1:9/$title", "WEBHOOK_METHOD": "FETCH"},
     "WEBHOOK_METHOD='FETCH' must be one of"),
    ({"WEBHOOK_URL": "http://127.0.0.1:9/", "WEBHOOK_METHOD": "POST"},
     "must contain $title or $content"),
    ({"WEBHOOK_URL": "http://127.0.0.1:9/", "WEBHOOK_METHOD": "POST", "WEBHOOK_BODY": "t: $title",
      "WEBHOOK_CONTENT_TYPE": "application/xml"}, "WEBHOOK_CONTENT_TYPE='application/xml'"),
    ({"TG_BOT_TOKEN": "123:abc"}, "TG_USER_ID is not set"),
    ({"SMTP_SERVER": "127.0.0.1:25", "SMTP_EMAIL": "a@example.org", "SMTP_SSL": "yes"},
     "SMTP_SSL='yes' must be true or false"),
    ({"NTFY_TOPIC": "t", "NTFY_URL": "ftp://x"}, "NTFY_URL must start with http"),
])
def test_a_channel_with_incomplete_settings_is_listed_with_the_reason_and_sends_nothing(values, reason):
    channel = _only(values)
    result = notify.send(channel, TITLE, CONTENT)

    assert reason in channel.error
    assert result == notify.Result(False, channel.error)


# --- the push services ----------------------------------------------------------------------

def test_ntfy_posts_the_content_to_the_topic_with_title_priority_and_token(receiver):
    result = _send({"NTFY_URL": receiver.url, "NTFY_TOPIC": "cron alerts", "NTFY_PRIORITY": "4",
                    "NTFY_TOKEN": "tk_1"}, title="Tâche 7 échouée")

    request = receiver.last
    assert result.ok
    assert (request["method"], request["path"]) == ("POST", "/cron%20alerts")
    assert request["body"].decode() == CONTENT
    assert str(make_header(decode_header(request["headers"]["title"]))) == "Tâche 7 échouée"
    assert request["headers"]["priority"] == "4"
    assert request["headers"]["authorization"] == "Bearer tk_1"


def test_ntfy_uses_basic_auth_and_priority_3_when_only_a_user_is_set(receiver):
    _send({"NTFY_URL": receiver.url + "/", "NTFY_TOPIC": "t", "NTFY_USERNAME": "ops",
           "NTFY_PASSWORD": "pw"})

    headers = receiver.last["headers"]
    assert receiver.last["path"] == "/t"
    assert headers["title"] == TITLE and headers["priority"] == "3"
    assert headers["authorization"] == "Basic " + base64.b64encode(b"ops:pw").decode()


def test_gotify_posts_a_form_to_message_with_the_token_in_its_header(receiver):
    receiver.default = (200, b'{"id": 12}')
    result = _send({"GOTIFY_URL": receiver.url, "GOTIFY_TOKEN": "AbC", "GOTIFY_PRIORITY": "8"})

    request = receiver.last
    assert result.ok and (request["method"], request["path"]) == ("POST", "/message")
    assert request["headers"]["x-gotify-key"] == "AbC"
    assert _form(request) == {"title": TITLE, "message": CONTENT, "priority": "8"}


def test_bark_posts_json_to_the_device_key_under_the_overridden_origin(receiver):
    receiver.default = (200, b'{"code": 200, "message": "success"}')
    result = _send({"BARK_PUSH": "DeviceKey1", "BARK_ORIGIN": receiver.url, "BARK_GROUP": "qlshadow",
                    "BARK_SOUND": "alarm", "BARK_LEVEL": "timeSensitive", "BARK_ARCHIVE": "1"})

    request = receiver.last
    assert result.ok and (request["method"], request["path"]) == ("POST", "/DeviceKey1")
    assert request["headers"]["content-type"].startswith("application/json")
    assert _json(request) == {"title": TITLE, "body": CONTENT, "group": "qlshadow",
                              "sound": "alarm", "level": "timeSensitive", "isArchive": "1"}


def test_bark_push_may_be_a_self_hosted_url_with_the_key(receiver):
    receiver.default = (200, b'{"code": 200}')
    assert _send({"BARK_PUSH": receiver.url + "/selfkey/"}).ok
    assert receiver.last["path"] == "/selfkey"


def test_telegram_posts_the_message_form_to_the_bot_api_host(receiver):
    receiver.default = (200, b'{"ok": true, "result": {}}')
    result = _send({"TG_BOT_TOKEN": "123:ABC", "TG_USER_ID": "42", "TG_API_HOST": receiver.url})

    request = receiver.last
    assert result.ok and (request["method"], request["path"]) == ("POST", "/bot123:ABC/sendMessage")
    assert _form(request) == {"chat_id": "42", "text": f"{TITLE}\n\n{CONTENT}",
                              "disable_web_page_preview": "true"}


def test_telegram_goes_through_the_http_proxy_with_its_credentials(receiver):
    receiver.default = (200, b'{"ok": true}')
    port = str(receiver.server.server_address[1])
    result = _send({"TG_BOT_TOKEN": "1:x", "TG_USER_ID": "42", "TG_API_HOST": "http://tg.invalid",
                    "TG_PROXY_HOST": "127.0.0.1", "TG_PROXY_PORT": port, "TG_PROXY_AUTH": "u:p"})

    request = receiver.last
    assert result.ok
    assert request["path"] == "http://tg.invalid/bot1:x/sendMessage"  # a proxy's absolute form
    assert request["headers"]["proxy-authorization"] == "Basic " + base64.b64encode(b"u:p").decode()


def test_telegram_reports_the_apis_own_refusal(receiver):
    receiver.default = (200, b'{"ok": false, "description": "chat not found"}')
    result = _send({"TG_BOT_TOKEN": "1:x", "TG_USER_ID": "42", "TG_API_HOST": receiver.url})
    assert result == notify.Result(False, 'HTTP 200: {"ok": false, "description": "chat not found"}')


@pytest.mark.parametrize("key, path", [("SCT123abc", "/SCT123abc.send"),
                                       ("sctp77tXYZ", "/send/sctp77tXYZ.send")])
def test_serverchan_posts_title_and_markdown_content_to_the_keys_path(receiver, key, path):
    receiver.default = (200, b'{"code": 0, "message": ""}')
    result = _send({"PUSH_KEY": key, "PUSH_KEY_ORIGIN": receiver.url})

    request = receiver.last
    assert result.ok and (request["method"], request["path"]) == ("POST", path)
    assert _form(request) == {"text": TITLE, "desp": CONTENT.replace("\n", "\n\n")}


def test_pushplus_posts_json_with_the_token_and_the_group(receiver):
    receiver.default = (200, b'{"code": 200, "msg": "ok"}')
    result = _send({"PUSH_PLUS_TOKEN": "pp", "PUSH_PLUS_USER": "team", "PUSH_PLUS_ORIGIN": receiver.url})

    request = receiver.last
    assert result.ok and (request["method"], request["path"]) == ("POST", "/send")
    assert _json(request) == {"token": "pp", "title": TITLE, "content": CONTENT, "topic": "team"}


def test_wecom_bot_posts_a_text_message_to_its_key(receiver):
    receiver.default = (200, b'{"errcode": 0, "errmsg": "ok"}')
    result = _send({"QYWX_KEY": "k-1", "QYWX_ORIGIN": receiver.url})

    request = receiver.last
    assert result.ok and request["path"] == "/cgi-bin/webhook/send?key=k-1"
    assert _json(request) == {"msgtype": "text", "text": {"content": f"{TITLE}\n\n{CONTENT}"}}


def test_dingtalk_request_carries_a_signature_the_secret_verifies(receiver):
    receiver.default = (200, b'{"errcode": 0, "errmsg": "ok"}')
    result = _send({"DD_BOT_TOKEN": "tok", "DD_BOT_SECRET": "SECabc", "DD_BOT_ORIGIN": receiver.url})

    request = receiver.last
    path, _, query = request["path"].partition("?")
    params = dict(urllib.parse.parse_qsl(query))
    expected = base64.b64encode(hmac.new(b"SECabc", f"{params['timestamp']}\nSECabc".encode(),
                                         hashlib.sha256).digest()).decode()
    assert result.ok and path == "/robot/send"
    assert params["access_token"] == "tok" and params["sign"] == expected
    assert _json(request) == {"msgtype": "text", "text": {"content": f"{TITLE}\n\n{CONTENT}"}}


def test_dingtalk_reports_an_errcode_answered_with_http_200(receiver):
    receiver.default = (200, b'{"errcode": 310000, "errmsg": "sign not match"}')
    result = _send({"DD_BOT_TOKEN": "tok", "DD_BOT_SECRET": "s", "DD_BOT_ORIGIN": receiver.url})
    assert result == notify.Result(False, 'HTTP 200: {"errcode": 310000, "errmsg": "sign not match"}')


def test_feishu_posts_text_to_the_hook_and_signs_when_a_secret_is_set(receiver):
    receiver.default = (200, b'{"code": 0, "msg": "success"}')
    result = _send({"FSKEY": "hook-1", "FSSECRET": "fs", "FSKEY_ORIGIN": receiver.url})

    request = receiver.last
    body = _json(request)
    key = f"{body['timestamp']}\nfs".encode()
    assert result.ok and request["path"] == "/open-apis/bot/v2/hook/hook-1"
    assert body["msg_type"] == "text" and body["content"] == {"text": f"{TITLE}\n\n{CONTENT}"}
    assert body["sign"] == base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


# --- failures -------------------------------------------------------------------------------

# --- the rest of QingLong's channels: one table ----------------------------------------------

def _query(request: dict) -> dict:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(request["path"]).query))


def _path(request: dict) -> str:
    return urllib.parse.urlsplit(request["path"]).path


TEXT = f"{TITLE}\n\n{CONTENT}"
CHAT_QUERY = "api=SYNO.Chat.External&method=incoming&version=2&token="

# name, settings (given the receiver's URL), method, path, the fields sent (read from
# the body, or the query for a GET), a reply the service means as success, one it means
# as failure (each with HTTP 200: only the service's own answer tells them apart).
CHANNEL_TABLE = [
    ("pushdeer", lambda url: {"DEER_KEY": "PDU1key", "DEER_URL": url + "/message/push"},
     "POST", "/message/push", _form,
     {"text": TITLE, "desp": CONTENT, "type": "markdown", "pushkey": "PDU1key"},
     b'{"code":0,"content":{"result":["{\\"counts\\":1}"]}}',
     b'{"code":0,"content":{"result":[]}}'),
    ("gobot", lambda url: {"GOBOT_URL": url + "/send_private_msg", "GOBOT_QQ": "user_id=12345",
                           "GOBOT_TOKEN": "gobot-token"},
     "GET", "/send_private_msg", _query,
     {"access_token": "gobot-token", "user_id": "12345", "message": TEXT},
     b'{"status":"ok","retcode":0}', b'{"status":"failed","retcode":100}'),
    ("igot", lambda url: {"IGOT_PUSH_KEY": "igot-key", "IGOT_ORIGIN": url},
     "POST", "/igot-key", _form, {"title": TITLE, "content": CONTENT},
     b'{"ret":0}', b'{"ret":201,"errMsg":"bad key"}'),
    ("chat", lambda url: {"CHAT_URL": f"{url}/webapi/entry.cgi?{CHAT_QUERY}",
                          "CHAT_TOKEN": "%22chat-token%22"},
     "POST", "/webapi/entry.cgi", _form,
     {"payload": json.dumps({"text": f"{TITLE}\n{CONTENT}"})},
     b'{"success":true}', b'{"success":false,"error":{"code":404}}'),
    ("weplus", lambda url: {"WE_PLUS_BOT_TOKEN": "weplus-token", "WE_PLUS_BOT_RECEIVER": "ops",
                            "WE_PLUS_BOT_ORIGIN": url},
     "POST", "/send", _json,
     {"token": "weplus-token", "title": TITLE, "content": CONTENT, "template": "txt",
      "receiver": "ops", "version": "pro"},
     b'{"code":200,"msg":"ok"}', b'{"code":903,"msg":"bad token"}'),
    ("qmsg", lambda url: {"QMSG_KEY": "qmsg-key", "QMSG_TYPE": "group", "QMSG_ORIGIN": url},
     "POST", "/group/qmsg-key", _form, {"msg": TEXT},
     b'{"success":true,"code":0}', b'{"success":false,"code":500,"reason":"no bot"}'),
    ("aibotk", lambda url: {"AIBOTK_KEY": "aibotk-key", "AIBOTK_TYPE": "room",
                            "AIBOTK_NAME": "ops room", "AIBOTK_ORIGIN": url},
     "POST", "/openapi/v1/chat/room", _json,
     {"apiKey": "aibotk-key", "roomName": "ops room", "message": {"type": 1, "content": TEXT}},
     b'{"code":0}', b'{"code":1,"error":"no room"}'),
    ("aibotk", lambda url: {"AIBOTK_KEY": "aibotk-key", "AIBOTK_TYPE": "contact",
                            "AIBOTK_NAME": "Ann", "AIBOTK_ORIGIN": url},
     "POST", "/openapi/v1/chat/contact", _json,
     {"apiKey": "aibotk-key", "name": "Ann", "message": {"type": 1, "content": TEXT}},
     b'{"code":0}', b'{"code":1,"error":"no contact"}'),
    ("pushme", lambda url: {"PUSHME_KEY": "pushme-key", "PUSHME_URL": url + "/"},
     "POST", "/", _form,
     {"push_key": "pushme-key", "title": TITLE, "content": CONTENT, "date": "", "type": ""},
     b"success", b"push_key invalid"),
    ("wxpusher", lambda url: {"WXPUSHER_APP_TOKEN": "AT_app", "WXPUSHER_UIDS": "UID_a; UID_b",
                              "WXPUSHER_TOPIC_IDS": "42", "WXPUSHER_ORIGIN": url},
     "POST", "/api/send/message", _json,
     {"appToken": "AT_app", "summary": TITLE, "contentType": 2, "topicIds": [42],
      "uids": ["UID_a", "UID_b"], "verifyPayType": 0,
      "content": f"<h1>{TITLE}</h1><br/><div style='white-space: pre-wrap;'>"
                 f"{CONTENT.replace('&', '&amp;')}</div>"},
     b'{"code":1000,"success":true}', b'{"code":1001,"msg":"appToken error"}'),
]
_IDS = [f"{case[0]}-{case[3]}" for case in CHANNEL_TABLE]


@pytest.mark.parametrize("name, settings, method, path, read, fields, good, bad", CHANNEL_TABLE,
                         ids=_IDS)
def test_each_channel_sends_what_qinglong_sends_and_takes_its_success_reply(
        receiver, name, settings, method, path, read, fields, good, bad):
    receiver.default = (200, good)
    channel = _only(settings(receiver.url))
    result = notify.send(channel, TITLE, CONTENT)

    request = receiver.last
    assert channel.name == name
    assert result == notify.Result(True, "HTTP 200")
    assert (request["method"], _path(request)) == (method, path)
    assert read(request) == fields
    if method == "GET":
        assert request["body"] == b""


@pytest.mark.parametrize("name, settings, method, path, read, fields, good, bad", CHANNEL_TABLE,
                         ids=_IDS)
def test_each_channel_reports_a_reply_its_service_means_as_failure(
        receiver, name, settings, method, path, read, fields, good, bad):
    receiver.default = (200, bad)
    result = _send(settings(receiver.url))

    assert not result.ok
    assert result.reason.startswith("HTTP 200: ")
    for key, value in settings(receiver.url).items():  # no secret of the channel in it
        if not key.endswith(("_URL", "_ORIGIN", "_TYPE")) and len(value) >= 4:
            assert value not in result.reason


def test_synology_chat_appends_the_token_to_its_url(receiver):
    receiver.default = (200, b'{"success":true}')
    _send({"CHAT_URL": f"{receiver.url}/webapi/entry.cgi?{CHAT_QUERY}", "CHAT_TOKEN": "%22t%22"})
    assert receiver.last["path"] == f"/webapi/entry.cgi?{CHAT_QUERY}%22t%22"


def test_weplus_sends_a_long_message_as_html(receiver):
    receiver.default = (200, b'{"code":200}')
    _send({"WE_PLUS_BOT_TOKEN": "weplus-token", "WE_PLUS_BOT_ORIGIN": receiver.url},
          content="x" * 801)
    assert _json(receiver.last)["template"] == "html"


def test_qmsg_shortens_its_separator_as_qinglong_does(receiver):
    receiver.default = (200, b'{"code":0}')
    _send({"QMSG_KEY": "qmsg-key", "QMSG_TYPE": "send", "QMSG_ORIGIN": receiver.url},
          content="a ---- b")
    assert _form(receiver.last) == {"msg": f"{TITLE}\n\na - b"}


def _wecom_app_receiver(receiver, send_reply=b'{"errcode":0,"errmsg":"ok"}'):
    def answer(request):
        if _path(request) == "/cgi-bin/gettoken":
            return 200, b'{"errcode":0,"access_token":"fetched-token-1","expires_in":7200}'
        return 200, send_reply
    receiver.default = answer


@pytest.mark.parametrize("media, kind, body", [
    ("", "text", {"text": {"content": TEXT}}),
    (",1", "text", {"text": {"content": TEXT}}),
    (",0", "textcard", {"textcard": {"title": TITLE, "description": CONTENT,
                                     "url": "https://github.com/whyour/qinglong",
                                     "btntxt": "more"}}),
    (",media-9", "mpnews", {"mpnews": {"articles": [{
        "title": TITLE, "thumb_media_id": "media-9", "author": "qlshadow",
        "content_source_url": "", "content": CONTENT.replace("\n", "<br/>"),
        "digest": CONTENT}]}}),
])
def test_wecom_app_fetches_a_token_then_sends_with_it(receiver, media, kind, body):
    _wecom_app_receiver(receiver)
    result = _send({"QYWX_AM": f"corp-1,corp-secret,@all,1000002{media}",
                    "QYWX_ORIGIN": receiver.url})

    assert result == notify.Result(True, "HTTP 200")
    token, message = receiver.requests
    assert (token["method"], _path(token)) == ("GET", "/cgi-bin/gettoken")
    assert _query(token) == {"corpid": "corp-1", "corpsecret": "corp-secret"}
    assert (message["method"], _path(message)) == ("POST", "/cgi-bin/message/send")
    assert _query(message) == {"access_token": "fetched-token-1"}
    assert _json(message) == {"touser": "@all", "agentid": "1000002", "safe": "0",
                              "msgtype": kind, **body}


def test_wecom_app_failures_name_neither_the_secret_nor_the_fetched_token(receiver):
    _wecom_app_receiver(receiver, b'{"errcode":40014,"errmsg":"invalid access_token fetched-token-1"}')
    result = _send({"QYWX_AM": "corp-1,corp-secret,@all,1000002", "QYWX_ORIGIN": receiver.url})
    assert not result.ok and "40014" in result.reason
    assert "fetched-token-1" not in result.reason and "corp-secret" not in result.reason

    receiver.requests.clear()
    receiver.default = (200, b'{"errcode":40001,"errmsg":"invalid credential corp-secret"}')
    result = _send({"QYWX_AM": "corp-1,corp-secret,@all,1000002", "QYWX_ORIGIN": receiver.url})
    assert not result.ok and "40001" in result.reason and "corp-secret" not in result.reason
    assert len(receiver.requests) == 1  # no message without a token


def test_chronocat_sends_once_to_each_user_and_group_with_its_token(receiver):
    result = _send({"CHRONOCAT_URL": receiver.url, "CHRONOCAT_TOKEN": "chrono-token",
                    "CHRONOCAT_QQ": "user_id=111;group_id=222;user_id=333"})

    assert result == notify.Result(True, "HTTP 200")
    peers = []
    for request in receiver.requests:
        assert (request["method"], request["path"]) == ("POST", "/api/message/send")
        assert request["headers"]["authorization"] == "Bearer chrono-token"
        body = _json(request)
        assert body["elements"] == [{"elementType": 1, "textElement": {"content": TEXT}}]
        peers.append((body["peer"]["chatType"], body["peer"]["peerUin"]))
    assert peers == [(1, "111"), (1, "333"), (2, "222")]


def test_chronocat_stops_at_the_first_refusal(receiver):
    receiver.fail_times(1, status=401, body=b"unauthorized")
    result = _send({"CHRONOCAT_URL": receiver.url, "CHRONOCAT_TOKEN": "chrono-token",
                    "CHRONOCAT_QQ": "user_id=111;group_id=222"})
    assert result == notify.Result(False, "HTTP 401: unauthorized")
    assert len(receiver.requests) == 1


@pytest.mark.parametrize("values, reason", [
    ({"GOBOT_URL": "http://127.0.0.1:9/send_private_msg", "GOBOT_QQ": "12345"},
     "GOBOT_QQ must be user_id=<QQ>"),
    ({"QYWX_AM": "corp,secret,@all"}, "QYWX_AM must be corpid,corpsecret,touser,agentid"),
    ({"QMSG_KEY": "k"}, "QMSG_TYPE is not set"),
    ({"QMSG_KEY": "k", "QMSG_TYPE": "pm"}, "QMSG_TYPE='pm' must be send or group"),
    ({"AIBOTK_KEY": "k", "AIBOTK_TYPE": "friend", "AIBOTK_NAME": "n"},
     "AIBOTK_TYPE='friend' must be room or contact"),
    ({"WXPUSHER_APP_TOKEN": "AT_x"}, "WXPUSHER_TOPIC_IDS or WXPUSHER_UIDS must be set"),
    ({"WXPUSHER_APP_TOKEN": "AT_x", "WXPUSHER_TOPIC_IDS": "a;1"}, "WXPUSHER_TOPIC_IDS must be numbers"),
    ({"CHRONOCAT_URL": "http://127.0.0.1:9", "CHRONOCAT_TOKEN": "t", "CHRONOCAT_QQ": "111"},
     "CHRONOCAT_QQ must name user_id"),
    ({"DEER_KEY": "k", "DEER_URL": "api2.pushdeer.com"}, "DEER_URL must start with http"),
    ({"CHAT_URL": "http://127.0.0.1:9/?token="}, "CHAT_TOKEN is not set"),
])
def test_qinglong_channels_with_bad_settings_name_the_variable(values, reason):
    channel = _only(values)
    assert reason in channel.error
    assert notify.send(channel, TITLE, CONTENT) == notify.Result(False, channel.error)


def test_skip_push_title_keeps_a_listed_title_from_every_channel(receiver):
    values = {"NTFY_URL": receiver.url, "NTFY_TOPIC": "t",
              "SKIP_PUSH_TITLE": "Daily report\nCron 7 failed"}
    assert _send(values) == notify.Result(True, "not sent: SKIP_PUSH_TITLE lists this title")
    assert receiver.requests == []
    assert _send(values, title="Cron 8 failed").reason == "HTTP 200"
    assert len(receiver.requests) == 1


def test_a_receiver_that_fails_twice_is_reported_each_time_then_succeeds(receiver):
    receiver.fail_times(2)
    channel = _only({"NTFY_URL": receiver.url, "NTFY_TOPIC": "t"})

    results = [notify.send(channel, TITLE, CONTENT) for _ in range(3)]

    assert results == [notify.Result(False, "HTTP 500: boom")] * 2 + [notify.Result(True, "HTTP 200")]
    assert len(receiver.requests) == 3  # one request per send: no retries inside


def test_an_unreachable_channel_is_a_network_error_that_names_no_secret(receiver):
    port = receiver.server.server_address[1]
    receiver.close()  # nothing listens on this port any more
    result = _send({"TG_BOT_TOKEN": "999:SECRET", "TG_USER_ID": "42",
                    "TG_API_HOST": f"http://127.0.0.1:{port}"})

    assert not result.ok and result.reason.startswith("network error:")
    assert "SECRET" not in result.reason and "SECRET" not in repr(_only({"TG_BOT_TOKEN": "999:SECRET"}))


def test_a_receiver_that_never_answers_fails_after_the_timeout(receiver):
    receiver.hold = True
    result = _send({"NTFY_URL": receiver.url, "NTFY_TOPIC": "t", "QL_NOTIFY_TIMEOUT": "0.5"})
    assert result == notify.Result(False, "no answer within 0.5 s")


def test_a_bad_timeout_setting_names_the_key():
    with pytest.raises(config.ConfigError, match="QL_NOTIFY_TIMEOUT"):
        notify.configured_channels({"NTFY_TOPIC": "t", "QL_NOTIFY_TIMEOUT": "soon"})


# --- SMTP -----------------------------------------------------------------------------------

class SmtpServer:
    """A minimal SMTP server on 127.0.0.1: EHLO, AUTH PLAIN, MAIL, RCPT, DATA, QUIT.

    It records each accepted message; `refuse_mail` answers MAIL FROM with 550.
    """

    def __init__(self):
        self.messages: list = []
        self.logins: list = []
        self.refuse_mail = False
        smtp = self

        class Handler(socketserver.StreamRequestHandler):
            def reply(self, line: str) -> None:
                self.wfile.write(line.encode() + b"\r\n")

            def handle(self):
                self.reply("220 test ESMTP")
                envelope: dict = {"rcpt": []}
                for raw in self.rfile:
                    verb, _, arg = raw.decode().rstrip("\r\n").partition(" ")
                    verb = verb.upper()
                    if verb == "EHLO":
                        self.reply("250-test")
                        self.reply("250 AUTH PLAIN")
                    elif verb == "AUTH":
                        _, _, blob = arg.partition(" ")
                        smtp.logins.append(base64.b64decode(blob).split(b"\0")[1:])
                        self.reply("235 ok")
                    elif verb == "MAIL":
                        if smtp.refuse_mail:
                            self.reply("550 sender rejected")
                            continue
                        envelope = {"from": arg, "rcpt": []}
                        self.reply("250 ok")
                    elif verb == "RCPT":
                        envelope["rcpt"].append(arg)
                        self.reply("250 ok")
                    elif verb == "DATA":
                        self.reply("354 go ahead")
                        lines = []
                        for line in self.rfile:
                            if line == b".\r\n":
                                break
                            lines.append(line[1:] if line.startswith(b"..") else line)
                        data = b"".join(lines).replace(b"\r\n", b"\n")  # as a mailbox stores it
                        smtp.messages.append({**envelope, "data": data})
                        self.reply("250 queued")
                    elif verb == "QUIT":
                        self.reply("221 bye")
                        return
                    else:
                        self.reply("250 ok")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def smtp_server():
    server = SmtpServer()
    yield server
    server.close()


def test_smtp_logs_in_and_mails_the_account_itself(smtp_server):
    result = _send({"SMTP_SERVER": smtp_server.address, "SMTP_SSL": "false",
                    "SMTP_EMAIL": "ops@example.org", "SMTP_PASSWORD": "app-pw", "SMTP_NAME": "QL 机器人"})

    assert result == notify.Result(True, "SMTP accepted")
    assert smtp_server.logins == [[b"ops@example.org", b"app-pw"]]
    [sent] = smtp_server.messages
    assert sent["from"].startswith("FROM:<ops@example.org>") and sent["rcpt"] == ["TO:<ops@example.org>"]
    mail = message_from_bytes(sent["data"], policy=policy.default)
    assert mail["Subject"] == TITLE
    assert mail["From"].addresses[0].display_name == "QL 机器人"
    assert mail["To"].addresses[0].addr_spec == "ops@example.org"
    assert mail.get_content().rstrip("\n") == CONTENT


def test_smtp_refusal_is_reported_with_its_code(smtp_server):
    smtp_server.refuse_mail = True
    result = _send({"SMTP_SERVER": smtp_server.address, "SMTP_EMAIL": "ops@example.org"})
    assert result == notify.Result(False, "SMTP 550: sender rejected")
    assert smtp_server.logins == [] and smtp_server.messages == []


# --- settings: the conf file and the environment --------------------------------------------

def test_the_environment_wins_over_the_conf_file_and_an_empty_variable_does_not(tmp_path):
    conf = tmp_path / "qlshadow.conf"
    conf.write_text("QL_PORT=5601\nWEBHOOK_URL=http://file.example/$title\nWEBHOOK_METHOD=POST\n"
                    "WEBHOOK_BODY='text: $title\\ndesp: $content'\nNTFY_TOPIC=from-file\n")

    values = notify.load_settings({"QL_CONFIG": str(conf), "WEBHOOK_URL": "http://env.example/$title",
                                   "NTFY_TOPIC": "", "PATH": "/bin"})

    assert values == {"WEBHOOK_URL": "http://env.example/$title", "WEBHOOK_METHOD": "POST",
                      "WEBHOOK_BODY": "text: $title\ndesp: $content", "NTFY_TOPIC": "from-file"}


def test_the_service_accepts_a_conf_file_that_holds_notification_settings(tmp_path):
    conf = tmp_path / "qlshadow.conf"
    conf.write_text(f"QL_DATA_DIR={tmp_path}\nTG_BOT_TOKEN=1:x\nTG_USER_ID=42\nSMTP_SSL=true\n")
    assert config.load({}, config_file=str(conf)).data_dir == str(tmp_path)


def test_the_shipped_conf_file_loads_and_configures_no_channel():
    path = os.path.join(ROOT, "conf", "qlshadow.conf")
    config.load({}, config_file=path)
    assert notify.configured_channels(notify.load_settings({}, config_file=path)) == []


def test_every_notification_variable_is_documented_and_in_the_shipped_conf_file():
    with open(os.path.join(ROOT, "docs", "NOTIFY.md"), encoding="utf-8") as fh:
        documented = fh.read()
    with open(os.path.join(ROOT, "conf", "qlshadow.conf"), encoding="utf-8") as fh:
        shipped = fh.read()
    for key in config.NOTIFY_KEYS:
        assert f"`{key}`" in documented, key
        assert f"\n#{key}=" in shipped, key
    for name in notify.CHANNEL_NAMES:
        assert f"`{name}`" in documented, name


# --- qlshadow notify --test -----------------------------------------------------------------

def _notify_cli(env: dict, *args: str, test: bool = True) -> subprocess.CompletedProcess:
    """`qlshadow notify --test` (or the tick) in a child process with only these
    notification settings."""
    drop = config.NOTIFY_KEYS | {"QL_CONFIG", *PROXY_VARIABLES}
    full = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("QL_")}
    full.update(env)
    command = ["notify", "--test"] if test else ["notify"]
    return subprocess.run([sys.executable, "-m", "qlshadow.cli", *args, *command],
                          env=full, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_notify_test_prints_one_ok_line_per_channel_and_exits_0(receiver, smtp_server):
    result = _notify_cli({"NTFY_URL": receiver.url, "NTFY_TOPIC": "t",
                          "SMTP_SERVER": smtp_server.address, "SMTP_EMAIL": "ops@example.org"})

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["ntfy: ok: HTTP 200 (settings from the environment)",
                                          "smtp: ok: SMTP accepted (settings from the environment)"]
    assert receiver.last["headers"]["title"] == "qlshadow: test notification"
    assert len(smtp_server.messages) == 1


def test_notify_test_exits_1_when_a_channel_fails_and_still_tries_the_others(receiver, tmp_path):
    receiver.fail_times(1, status=403, body=b"forbidden")
    conf = tmp_path / "qlshadow.conf"
    conf.write_text(f"WEBHOOK_URL={receiver.url}/hook?t=$title\nWEBHOOK_METHOD=GET\n"
                    f"GOTIFY_URL={receiver.url}\nGOTIFY_TOKEN=tok\n")

    result = _notify_cli({}, "--config", str(conf))

    assert result.returncode == 1
    assert result.stdout.splitlines() == [f"webhook: FAILED: HTTP 403: forbidden (settings from {conf})",
                                          f"gotify: ok: HTTP 200 (settings from {conf})"]
    assert len(receiver.requests) == 2


def test_notify_without_a_channel_is_a_quiet_tick_and_its_help_names_test(capsys):
    # Without --test it is the tick crond runs (tests/test_alerts.py): with no channel it
    # returns before it opens any database.
    result = _notify_cli({}, test=False)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    with pytest.raises(SystemExit) as leaving:
        main(["notify", "--help"])
    assert leaving.value.code == 0 and "--test" in capsys.readouterr().out


def test_notify_test_with_no_channel_says_so_and_exits_1():
    result = _notify_cli({})
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "qlshadow: no notification channel is configured; docs/NOTIFY.md lists the variables "
        "(WEBHOOK_URL, TG_BOT_TOKEN, SMTP_SERVER, ...)"]


def test_the_callback_path_never_imports_the_notify_module():
    code = ("import sys; from qlshadow import cli; from qlshadow.core import callback; "
            "from qlshadow.web.views import callback as route, create_app; "
            "print('qlshadow.watch.notify' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == "False"
