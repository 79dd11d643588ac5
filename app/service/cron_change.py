"""Cron changes: the one place that opens a write transaction around a crontab install.

A cron change is kept only when the crontab that follows from it installs; host/crontab/
renders the block, reads and installs the crontab and holds the locks.
"""
from __future__ import annotations

from typing import Any, TypeVar
from collections.abc import Callable

from qlshadow.host import crontab

T = TypeVar("T")


class _DryRun(Exception):
    def __init__(self, result, rows: list):
        super().__init__("dry run")
        self.result, self.rows = result, rows


def change(settings, apply: Callable[[Any], T],
           take: Callable[[bytes], tuple] | None = None) -> tuple[T, str]:
    """Make a cron change only when the crontab that follows from it installs.

    apply(planned) makes the change inside a write transaction, twice: first as a dry run
    (rolled back, planned=None) whose crons are rendered and installed, then for real with
    planned = the dry run's result (so a new cron keeps the id its line was installed
    with). No write transaction is open while the install command runs. A failed install
    raises crontab.CrontabError with nothing changed; a commit that fails after the install
    puts the crontab back as the database has it. Returns (apply's result, what was done where).

    take(crontab), when given, runs first under the lock with the crontab as read then and
    returns lines of the user's to take out in the same install (or raises to refuse).
    """
    from qlshadow.storage.db import connected, write_transaction
    with crontab.Lock(settings), connected():
        crontab.check_installer(settings)  # this command's problem, not the server's state
        original = crontab.read_crontab(settings) if take else b""
        drop = take(original) if take else ()
        try:
            try:
                with write_transaction():
                    raise _DryRun(apply(None), crontab.stored_crons())
            except _DryRun as dry:
                planned, rows = dry.result, dry.rows
            # After the dry run: a refused change (invalid input, an unknown cron) writes nothing,
            # not even the runner token.
            crontab.prepare_runner(settings)
            content, active = crontab.render_rows(settings, rows)
            outcome = crontab.put(settings, content, active, drop)
        except crontab.CrontabError as exc:
            crontab.note_state(settings, str(exc))
            raise
        try:
            with write_transaction():
                result = apply(planned)
        except BaseException:
            try:
                if drop:  # the user's lines taken out come back with the crontab as it was
                    crontab.install_bytes(settings, original)
                crontab.sync_locked(settings)
            except crontab.CrontabError:
                pass  # kept for install_state by sync_locked
            raise
        crontab.note_state(settings, None)
        if crontab.render(settings) != content:
            # Another host sharing the database changed crons between the two passes.
            outcome = crontab.sync_locked(settings)
        return result, outcome
