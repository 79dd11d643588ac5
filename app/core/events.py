"""Alert events: a row when a cron's health state changes, in the transaction that changed it.

The callback's Legacy update returns the cron's last alerted state (crons.alert_state)
with the row it already writes, and the new state is compared in Python: an ordinary
callback (a success after a success, a failure after a failure, every start) writes
nothing more. Only a change writes the cron's new state and one event row. The `notify`
tick (watch/alerts/) writes the states it finds by schedule (missed, stuck) through
`record_if` below, a compare-and-set, so a callback and a tick, or two ticks, never both
record one change. No Flask, no network: the callback path imports this module.
"""
from __future__ import annotations

from qlshadow.storage.db import Statement, slot
from qlshadow.storage.models import AlertEvent, Cron

# The states an event names. "ok" after one of the others is a recovery.
ALERT_STATES = ("failed", "missed", "stuck", "ok")

_SET_STATE = Statement(lambda: Cron.update({Cron.alert_state: slot("state")})
                       .where(Cron.id == slot("id")))
_INSERT = Statement(lambda: AlertEvent.insert({
    AlertEvent.cron: slot("id"), AlertEvent.at: slot("at"), AlertEvent.state: slot("state"),
    AlertEvent.previous: slot("previous"), AlertEvent.exit_code: slot("exit_code"),
    AlertEvent.log_path: slot("log_path"), AlertEvent.reason: slot("reason"),
    AlertEvent.status: 0}).returning())


def finish_state(exit_code) -> str | None:
    """The alert state a finish callback reports: failed (non-zero), ok (0), None (no code:
    no evidence either way, so the state is left as it was)."""
    if exit_code is None:
        return None
    return "failed" if exit_code else "ok"


def record(cron_id: int, previous, state: str, now: int, exit_code=None, log_path=None,
           reason=None) -> None:
    """Write the cron's new alert state and its event (the caller holds the row's lock)."""
    values = {"id": cron_id, "state": state}
    _SET_STATE.execute(values)
    values.update(at=now, previous=previous, exit_code=exit_code, log_path=log_path,
                  reason=reason)
    _INSERT.execute(values)


def record_if(cron_id: int, expected, state: str, now: int, exit_code=None, log_path=None,
              reason=None) -> bool:
    """Record a state change only if the cron's alert state is still `expected` (a
    compare-and-set in one statement); False when another writer changed it first."""
    held = Cron.alert_state.is_null() if expected is None else Cron.alert_state == expected
    changed = Cron.update(alert_state=state).where((Cron.id == cron_id) & held).execute()
    if not changed:
        return False
    AlertEvent.insert(cron=cron_id, at=now, state=state, previous=expected,
                      exit_code=exit_code, log_path=log_path, reason=reason, status=0).execute()
    return True
