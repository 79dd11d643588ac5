"""Notification channels, configured with QingLong's notify variable names (docs/NOTIFY.md).

Standard library only and no Flask: `qlshadow notify`, the alert tick and the service's
sender import this package, the callback path never does. `send` makes one attempt with a
short timeout and never raises for a channel's failure; whoever calls it decides about
retries. Every result leaves through `send`, which cuts it to one line and scrubs the
channel's secrets and every query string from it, so no token or password reaches the
notification log or a terminal.

The parts: settings (which channels are configured, and from where), registry (the channel
table), webhook, push_apps, chat_bots and smtp (the request each channel builds), request
(what an HTTP channel's builder returns and its helpers), transport (the HTTP send), scrub
(what a result may show), sending (the entry points) and model (the shapes they share).
"""
from qlshadow.watch.notify.model import Channel, ChannelError, Result
from qlshadow.watch.notify.registry import CHANNEL_NAMES
from qlshadow.watch.notify.scrub import REASON_MAX_CHARS, scrub
from qlshadow.watch.notify.sending import send, test_message
from qlshadow.watch.notify.settings import (configured_channels, load_settings, load_sources, notes,
                                            skipped)

__all__ = ["CHANNEL_NAMES", "REASON_MAX_CHARS", "Channel", "ChannelError", "Result",
           "configured_channels", "load_settings", "load_sources", "notes", "scrub", "send",
           "skipped", "test_message"]
