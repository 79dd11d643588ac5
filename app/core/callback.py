"""The status callback that crond jobs send: the whole hot path of the service, without HTTP.

handle() takes the request body and answers with the Shadow outcome and the crons whose
alert state the callback changed (an event to send once it is committed): parse the body
strictly (legacy.parse_status_callback), then one transaction holding the Legacy rules 1-5
(legacy.apply_status_callback), a bounded retention step, and the Shadow writer
(shadow/writer.py) when Shadow is on and the callback carries an execution_id. Refusals
raise the core's errors (qlshadow.errors). The only web adapter is views/callback.py.
"""
from __future__ import annotations

import time

from qlshadow.storage import db
from qlshadow.core.legacy import (NOT_GIVEN, apply_status_callback, decode_json,
                                  parse_status_callback)

PATH = "/open/crons/status"
SCOPES = ("crons", "status")  # the runner's token has only "status"


def handle(raw: bytes, settings, runtime) -> tuple:
    """Parse and apply one callback body in one write transaction; raises on any refusal.

    Returns (the Shadow outcome, "off" when Shadow did not run; the ids of the crons whose
    alert event it recorded, usually none). The HTTP answer depends on neither; the web
    adapter wakes the alert sender (watch/sender.py) for the second once it has answered.
    """
    cb = parse_status_callback(decode_json(raw))
    now = int(time.time())
    shadow = settings.shadow_on and cb.execution_id is not NOT_GIVEN
    outcome, alerted = db.run_write(_write, runtime.pruner, cb, now, shadow,
                                    settings.failure_cap, settings.shadow_savepoint,
                                    runtime.host_id)
    # Committed: /health hears that writes work, and the Shadow outcome is counted (a
    # rolled-back one never is). A database error out of run_write wrote nothing; the web
    # adapter's error answer (views/errors.answer_for) records it.
    runtime.writes.note_ok()
    if outcome != "off":
        runtime.counters.count_shadow(outcome)
    return outcome, alerted


def _write(pruner, cb, now: int, shadow: bool, failure_cap: int, fail_open: bool,
           host_id: int | None = None) -> tuple:
    """The body of the callback's one transaction: (Shadow outcome, alerted cron ids);
    host_id: this host's (None on SQLite)."""
    alerted = []  # filled by the Legacy rules, with no statement of its own
    crons = apply_status_callback(cb, now, alerted, host_id)
    # Bounded retention shares the callback's transaction, outside Shadow's savepoint.
    pruner.on_write(now)
    if not shadow:
        return "off", alerted
    return (_observe or _load_writer())(cb, crons, now, failure_cap, fail_open,
                                        host_id), alerted


_observe = None


def _load_writer():
    # Imported on first use: with Shadow off (the default) the writer is never loaded; once
    # loaded it is kept here, not looked up by an import statement on every callback.
    global _observe
    from qlshadow.core.shadow.writer import observe
    _observe = observe
    return observe
