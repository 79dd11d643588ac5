"""What a receiver can make a notification do (docs/NOTIFY.md): a redirect is followed only
within the origin the settings name, with the request as it was, and a reply quoted in a
result holds one line, no secret of the channel's and no query string, wherever it is
shown (the send's result, `qlshadow notify --test`, the notification log). Real receivers
on 127.0.0.1."""
from __future__ import annotations

import base64
import re
import time

import pytest

from qlshadow.watch import notify
from test_alerts import deliveries, run, tick
from test_notify_channels import TITLE, CONTENT, _notify_cli
from receivers import Receiver


@pytest.fixture
def other():
    """A second receiver: another origin (its own port)."""
    server = Receiver()
    yield server
    server.close()


def webhook(url: str) -> dict:
    return {"WEBHOOK_URL": f"{url}/hook?token=URLSECRET123&t=$title", "WEBHOOK_METHOD": "POST",
            "WEBHOOK_CONTENT_TYPE": "application/json",
            "WEBHOOK_HEADERS": "Authorization: Bearer HDRSECRET456\nX-Api-Key: KEYSECRET789",
            "WEBHOOK_BODY": "text: $content\napikey: BODYSECRET321"}


WEBHOOK_SECRETS = ("URLSECRET123", "HDRSECRET456", "KEYSECRET789", "BODYSECRET321")


def send(values: dict) -> notify.Result:
    [channel] = notify.configured_channels(values)
    return notify.send(channel, TITLE, CONTENT)


def moved(code: int, location: str) -> tuple:
    return (code, b"moved", {"Location": location})


# --- redirects ------------------------------------------------------------------------------

@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_origin_is_refused_and_the_other_server_hears_nothing(
        receiver, other, code):
    receiver.default = moved(code, f"{other.url}/elsewhere")

    result = send(webhook(receiver.url))

    assert result == notify.Result(False, f"redirect to another origin refused: {other.url}")
    assert len(receiver.requests) == 1 and other.requests == []


@pytest.mark.parametrize("values", [
    lambda url: {"NTFY_URL": url, "NTFY_TOPIC": "ops", "NTFY_TOKEN": "tk_secret"},
    lambda url: {"GOTIFY_URL": url, "GOTIFY_TOKEN": "gotify-secret"},
    lambda url: {"TG_BOT_TOKEN": "1:secret", "TG_USER_ID": "42", "TG_API_HOST": url},
], ids=["ntfy", "gotify", "telegram"])
def test_every_channel_refuses_a_redirect_to_another_origin(receiver, other, values):
    receiver.default = moved(302, f"{other.url}/elsewhere")
    result = send(values(receiver.url))
    assert result == notify.Result(False, f"redirect to another origin refused: {other.url}")
    assert other.requests == []


@pytest.mark.parametrize("location, origin", [
    ("http://localhost:{port}/x", "http://localhost:{port}"),  # another host, same port
    ("https://127.0.0.1:{port}/x", "https://127.0.0.1:{port}"),  # another scheme
    ("//127.0.0.2:{port}/x", "http://127.0.0.2:{port}"),  # scheme-relative
    ("http://user:pw@127.0.0.1/x", "http://127.0.0.1"),  # the default port, not ours
])
def test_another_host_scheme_or_port_is_another_origin(receiver, location, origin):
    port = receiver.server.server_address[1]
    receiver.default = moved(302, location.format(port=port))
    result = send(webhook(receiver.url))
    assert result == notify.Result(False, "redirect to another origin refused: "
                                   + origin.format(port=port))
    assert len(receiver.requests) == 1


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("location", ["/moved?to=here", "{url}/moved?to=here", "moved?to=here"])
def test_a_same_origin_redirect_repeats_the_request_with_its_method_body_and_headers(
        receiver, code, location):
    receiver.replies = [moved(code, location.format(url=receiver.url))]

    result = send(webhook(receiver.url))

    assert result == notify.Result(True, "HTTP 200")
    first, second = receiver.requests
    assert second["path"] == "/moved?to=here"
    assert (second["method"], second["body"]) == ("POST", first["body"]) and first["body"]
    for name in ("authorization", "x-api-key", "content-type"):
        assert second["headers"][name] == first["headers"][name]


def test_a_receiver_that_keeps_redirecting_is_followed_three_times_then_fails(receiver):
    receiver.default = moved(307, "/again")
    result = send(webhook(receiver.url))
    assert result == notify.Result(False, "redirected more than 3 times")
    assert len(receiver.requests) == 4  # the request and three redirects


@pytest.mark.parametrize("code", [300, 302, 304])
def test_a_redirect_without_a_location_is_a_failure(receiver, code):
    receiver.default = (code, b"")
    result = send(webhook(receiver.url))
    assert result == notify.Result(False, f"HTTP {code}: a redirect without a Location")


def test_the_environments_proxy_carries_the_request_and_its_same_origin_redirect(
        receiver, monkeypatch):
    monkeypatch.setenv("http_proxy", receiver.url)
    receiver.replies = [moved(302, "/moved")]

    result = send({"WEBHOOK_URL": "http://hook.invalid/hook?t=$title", "WEBHOOK_METHOD": "GET"})

    assert result == notify.Result(True, "HTTP 200")
    assert [r["path"] for r in receiver.requests][1] == "http://hook.invalid/moved"
    assert receiver.requests[0]["path"].startswith("http://hook.invalid/hook?t=")


def test_a_redirect_through_the_environments_proxy_to_another_origin_is_refused(
        receiver, monkeypatch):
    monkeypatch.setenv("http_proxy", receiver.url)
    receiver.default = moved(302, "http://elsewhere.invalid/x")
    result = send({"WEBHOOK_URL": "http://hook.invalid/hook?t=$title", "WEBHOOK_METHOD": "GET"})
    assert result == notify.Result(False, "redirect to another origin refused: "
                                   "http://elsewhere.invalid")
    assert len(receiver.requests) == 1


def test_a_refused_redirect_is_stored_as_not_sent_and_tried_again(
        settings, client, auth, make_cron, receiver, other):
    cron = make_cron(schedule="@once")
    run(client, auth, cron["id"], 2)
    receiver.default = moved(302, f"{other.url}/elsewhere")

    done = tick(settings, notify.configured_channels(webhook(receiver.url)), int(time.time()))

    assert (done["sent"], done["retrying"]) == (0, 1)
    [delivery] = deliveries()
    assert delivery["outcome"] == "pending"
    assert delivery["last_error"] == f"redirect to another origin refused: {other.url}"
    assert other.requests == []


# --- replies quoted in a result -------------------------------------------------------------

# Headers every request carries; the echo leaves them out so that its line stays short.
ORDINARY = {"host", "user-agent", "accept-encoding", "connection", "content-length",
            "content-type", "title", "priority"}


def echo(request: dict) -> tuple:
    """A debugging receiver's answer: the request line, its headers and body, twice."""
    headers = " ".join(f"{k}={v}" for k, v in request["headers"].items() if k not in ORDINARY)
    line = f"echo: {request['method']} {request['path']} {headers} body={request['body']!r}"
    return (500, f"{line}\nagain: {line}".encode())


def assert_clean(reason: str, secrets) -> None:
    assert "\n" not in reason
    for secret in secrets:
        assert secret not in reason
    assert all(query == "?***" for query in re.findall(r"\?\S*", reason)), reason


BASIC = base64.b64encode(b"ops:PWSECRET99").decode()


@pytest.mark.parametrize("values, secrets", [
    (webhook, WEBHOOK_SECRETS),
    (lambda url: {"NTFY_URL": url, "NTFY_TOPIC": "ops", "NTFY_TOKEN": "tk_NTFYSECRET"},
     ("tk_NTFYSECRET",)),
    (lambda url: {"NTFY_URL": url, "NTFY_TOPIC": "ops", "NTFY_USERNAME": "ops",
                  "NTFY_PASSWORD": "PWSECRET99"}, (BASIC,)),
    (lambda url: {"GOTIFY_URL": url, "GOTIFY_TOKEN": "GOTSECRET"}, ("GOTSECRET",)),
    (lambda url: {"TG_BOT_TOKEN": "123:TGSECRET", "TG_USER_ID": "42", "TG_API_HOST": url},
     ("TGSECRET",)),
    (lambda url: {"DD_BOT_TOKEN": "DDSECRETTOKEN", "DD_BOT_SECRET": "SECsigning",
                  "DD_BOT_ORIGIN": url}, ("DDSECRETTOKEN", "sign=", "timestamp=")),
    (lambda url: {"QYWX_KEY": "WECOMSECRET", "QYWX_ORIGIN": url}, ("WECOMSECRET", "key=")),
    (lambda url: {"BARK_PUSH": f"{url}/BARKSECRETKEY"}, ("BARKSECRETKEY",)),
], ids=["webhook", "ntfy-token", "ntfy-basic", "gotify", "telegram", "dingtalk", "wecom",
        "bark-url"])
def test_an_echoed_request_is_quoted_on_one_line_without_secrets_or_query(
        receiver, values, secrets):
    receiver.default = echo

    result = send(values(receiver.url))

    said = echo(receiver.last)[1].decode()
    assert all(secret in said for secret in secrets)  # the receiver did give them away
    assert not result.ok and result.reason.startswith("HTTP 500: echo: ")
    assert len(result.reason) < notify.REASON_MAX_CHARS  # not cut: scrubbing removed them
    assert_clean(result.reason, secrets)


def test_the_webhooks_echo_keeps_what_is_not_secret(receiver):
    receiver.default = echo
    result = send(webhook(receiver.url))
    assert result.reason.startswith("HTTP 500: echo: POST ***?*** authorization=*** "
                                    "x-api-key=*** body=")
    assert '"apikey": "***"' in result.reason


def test_a_secret_is_scrubbed_before_the_reason_is_cut_to_length(receiver):
    padding = "x" * (notify.REASON_MAX_CHARS - len("HTTP 500: ") - 4)
    receiver.default = (500, f"{padding}HDRSECRET456".encode())
    result = send(webhook(receiver.url))
    assert result.reason == f"HTTP 500: {padding}***"


def test_notify_test_prints_an_echo_without_secrets_or_query(receiver):
    receiver.default = echo

    result = _notify_cli(webhook(receiver.url))

    assert result.returncode == 1
    [line] = result.stdout.splitlines()
    assert line.startswith("webhook: FAILED: HTTP 500: echo: POST ***?*** ")
    assert_clean(line, WEBHOOK_SECRETS)
    assert not any(secret in result.stdout + result.stderr for secret in WEBHOOK_SECRETS)


def test_the_notification_log_stores_an_echo_without_secrets_or_query(
        settings, client, auth, make_cron, receiver):
    cron = make_cron(schedule="@once")
    run(client, auth, cron["id"], 2)
    receiver.default = echo

    tick(settings, notify.configured_channels(webhook(receiver.url)), int(time.time()))

    [delivery] = deliveries()
    assert delivery["outcome"] == "pending"
    assert delivery["last_error"].startswith("HTTP 500: echo: POST ***?*** ")
    response = client.get("/open/notifications", headers=auth)
    [row] = [r for r in response.get_json()["data"] if r["channel"]]
    assert row["last_error"] == delivery["last_error"]
    assert_clean(row["last_error"], WEBHOOK_SECRETS)
