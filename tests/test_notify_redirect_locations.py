"""Redirect Locations a receiver can answer with, beyond test_notify_safety's: the IPv6
address of the red team's finding, other schemes and malformed ports. None is followed, each
is a failure with its reason, and the message's headers reach no other address
(docs/NOTIFY.md; real receivers on loopback)."""
from __future__ import annotations

import socket
import threading

import pytest

from qlshadow.watch import notify
from test_notify_channels import TITLE, CONTENT
from test_notify_safety import moved, webhook


def send(values: dict) -> notify.Result:
    [channel] = notify.configured_channels(values)
    return notify.send(channel, TITLE, CONTENT)


class Listener:
    """A socket on [::1] that counts the connections made to it."""

    def __init__(self):
        try:
            self.sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            self.sock.bind(("::1", 0))
        except OSError as exc:
            pytest.skip(f"no IPv6 loopback here: {exc}")
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self):
        self.stopped.set()
        self.thread.join()
        self.sock.close()


def test_a_redirect_to_an_ipv6_loopback_is_another_origin_and_hears_nothing(receiver):
    other = Listener()
    try:
        receiver.default = moved(302, f"http://[::1]:{other.port}/elsewhere")
        result = send(webhook(receiver.url))
    finally:
        other.close()
    assert result == notify.Result(False, f"redirect to another origin refused: "
                                   f"http://[::1]:{other.port}")
    assert len(receiver.requests) == 1 and other.accepted == 0


@pytest.mark.parametrize("location, origin", [
    ("file:///etc/passwd", "file://"),
    ("ftp://127.0.0.1:{port}/x", "ftp://127.0.0.1:{port}"),
    ("HTTP://[::ffff:127.0.0.1]:{port}/x", "http://[::ffff:127.0.0.1]:{port}"),
])
def test_a_redirect_to_another_scheme_or_spelling_of_the_address_is_refused(
        receiver, location, origin):
    port = receiver.server.server_address[1]
    receiver.default = moved(307, location.format(port=port))
    result = send(webhook(receiver.url))
    assert result == notify.Result(False, "redirect to another origin refused: "
                                   + origin.format(port=port))
    assert len(receiver.requests) == 1


@pytest.mark.parametrize("location", ["http://127.0.0.1:port/x", "http://127.0.0.1:99999/x"])
def test_a_redirect_to_a_malformed_location_is_a_failure_with_its_reason(receiver, location):
    receiver.default = moved(301, location)
    result = send(webhook(receiver.url))
    assert result == notify.Result(False, "HTTP 301: a redirect to a malformed Location refused")
    assert len(receiver.requests) == 1


def test_a_same_origin_location_in_capitals_is_followed_with_the_headers(receiver):
    port = receiver.server.server_address[1]
    receiver.replies = [moved(308, f"HTTP://127.0.0.1:{port}/moved")]
    result = send(webhook(receiver.url))
    assert result == notify.Result(True, "HTTP 200")
    first, second = receiver.requests
    assert second["path"] == "/moved" and second["method"] == "POST"
    assert second["headers"]["authorization"] == first["headers"]["authorization"]
