"""The crontab work's two errors: one it could not do, and a cron too long for any daemon."""
from __future__ import annotations


class CrontabError(Exception):
    """The crontab could not be written or installed; the message is one sentence."""


class CronTooLong(ValueError):
    """A cron whose crontab line no daemon would install; .field names the longest text."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
