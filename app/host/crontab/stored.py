"""What the crontab work reads from the database and writes to it: the stored crons, whether
this host is one of a fleet, and the runner token task.sh uses.

This is the host layer's only use of storage and core.auth, and issue_runner_token its only
write transaction; service/cron_change.py opens the transaction of a cron change.
"""
from __future__ import annotations

from qlshadow.host.crontab.errors import CrontabError


def stored_crons() -> list:
    from qlshadow.storage.db import connected
    from qlshadow.storage.models import Cron
    with connected():
        return list(Cron.select().order_by(Cron.id).dicts())


def in_a_fleet() -> bool:
    """True when more than one host has recorded itself in the database (core/fleet.py);
    False with no database open (a block rendered from rows alone)."""
    from qlshadow.storage.db import connected
    from qlshadow.storage.models import Host, database
    if database.obj is None:
        return False
    with connected():
        return Host.select().limit(2).count() > 1


def issue_runner_token(data: str) -> None:
    """Make sure the data dir's runner token is valid, in a write transaction of its own."""
    from peewee import DatabaseError, InterfaceError

    from qlshadow.core.auth import runner_token
    from qlshadow.storage.db import connected, write_transaction
    from qlshadow.errors import QlError
    try:
        with connected(), write_transaction():
            runner_token(data)
    except QlError as exc:  # an app that took the runner's name, say
        raise CrontabError(f"cannot issue the runner token: {exc}") from None
    except (DatabaseError, InterfaceError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CrontabError(f"cannot issue the runner token: {first}") from None
