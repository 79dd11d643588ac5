"""The core's own errors: what went wrong, in one sentence a user can act on.

The core (legacy, crons, runner, shadow, reconcile ...) raises these and knows nothing of
HTTP; the web layer (views/errors.py) and the command line (cli/entry.py) each turn them into
their own answer.
"""
from __future__ import annotations


class QlError(Exception):
    """Base of the core's errors; str(error) is the one-sentence message."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidInput(QlError):
    """A value the caller sent cannot be used; the message names the field."""


class NotFound(QlError):
    """The thing named (a cron, a run) does not exist."""


class Conflict(QlError):
    """The change conflicts with data that already exists."""


class Unavailable(QlError):
    """A part the request needs cannot work right now (a missing script, a full disk)."""
