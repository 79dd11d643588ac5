"""The public entry points: `send`, one message through one channel, once, never raising for
the channel's failure (whoever calls it decides about retries), with every result scrubbed
on the way out; and the message `qlshadow notify --test` sends."""
from __future__ import annotations

import socket
import time

from qlshadow.watch.notify.model import Channel, ChannelError, Result
from qlshadow.watch.notify.registry import CHANNELS
from qlshadow.watch.notify.scrub import scrub
from qlshadow.watch.notify.settings import skipped
from qlshadow.watch.notify.smtp import send_smtp
from qlshadow.watch.notify.transport import send_http

NEEDS_OPENSSL = ("needs the OpenWrt package python3-openssl "
                 "(opkg install python3-openssl / apk add python3-openssl)")


def send(channel: Channel, title: str, content: str) -> Result:
    """Send one message through one channel, once; never raises for the channel's failure."""
    if channel.error:
        return Result(False, channel.error)
    if skipped(channel.values, title):
        return Result(True, "not sent: SKIP_PUSH_TITLE lists this title")
    try:
        prepared = CHANNELS[channel.name][1](channel.values, title, content)
        needs_tls = prepared.use_ssl if channel.name == "smtp" else prepared.url.startswith("https:")
        if needs_tls:
            try:
                import ssl  # noqa: F401
            except ImportError:  # OpenWrt's python3-light lacks _ssl: say which package to add
                what = "SMTP over SSL" if channel.name == "smtp" else "https"
                return Result(False, f"{what} {NEEDS_OPENSSL}")
        if channel.name == "smtp":
            result = send_smtp(prepared, title, content, channel.timeout)
        else:
            result = send_http(prepared, channel.timeout)
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
