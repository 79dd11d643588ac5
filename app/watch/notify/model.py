"""What the rest of the notify package passes around: a configured Channel, the Result of one
send attempt, and the ChannelError a channel's builder raises for settings it cannot use."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_TIMEOUT = 5.0


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
