"""Step 1, find: what the schedule says and no callback can (a cron that missed a firing or
is stuck, or is ok again without a finish saying so), recorded as an event the way a
callback records its own; and the firings near now kept in a file between ticks."""
from __future__ import annotations

import os
import time

from peewee import SQL

from qlshadow.core import events
from qlshadow.storage import db
from qlshadow.storage.models import INSTANCE_RUNNING, Cron, RunningInstance

_OPEN = RunningInstance.status == SQL(str(INSTANCE_RUNNING))
FIRINGS_FILE = "notify-firings.json"


def _load_firings(settings) -> list:
    """The firings near now that earlier ticks worked out (health keeps them per process:
    each tick is a new process, and working them out is most of an idle tick's own work)."""
    import json
    from qlshadow.watch import health
    path = os.path.join(settings.data_dir, FIRINGS_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            kept = json.load(fh)
        if kept.get("zone") == list(_zone_key()) and kept.get("version") == 2:
            health.keep_near_firings(kept["near"])
            return kept["near"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # none yet, or unreadable: worked out again, and written anew
    return []


def _zone_key() -> tuple:
    return (time.timezone, time.altzone, time.daylight, list(time.tzname))


def _keep_firings(settings, loaded: list, now: int) -> None:
    """Write the firings back only when a tick worked out new ones (about every two hours
    per schedule: each entry covers four hours ahead), so an idle tick writes nothing."""
    import json
    from qlshadow.watch import health
    from qlshadow.files import write_private
    near = [e for e in health.near_firings() if e[3] > now]
    if sorted(tuple(e[:4]) for e in near) == sorted(tuple(e[:4]) for e in loaded):
        return
    try:
        write_private(os.path.join(settings.data_dir, FIRINGS_FILE),
                      json.dumps({"version": 2, "zone": list(_zone_key()), "near": near}))
    except OSError:
        pass  # a cache: the next tick works them out again


def find_changes(settings, now: int) -> int:
    """Record the missed and stuck crons (and their recovery) the schedule shows."""
    from qlshadow.watch import health
    loaded = _load_firings(settings)
    with db.connected():
        from qlshadow.host.crond import kind_for
        # The daemon is looked for in /proc only when a firing or a run needs it.
        healths = health.read_all(now, shadow=settings.shadow_on,
                                  daemon=lambda: kind_for(settings))
        alerted = dict(Cron.select(Cron.id, Cron.alert_state).tuples())
    _keep_firings(settings, loaded, now)
    changes = []
    for h in healths:
        old = alerted.get(h["cron_id"])
        if h["state"] in ("missed", "stuck"):
            new = h["state"]
        elif h["state"] == "ok" and old in ("missed", "stuck"):
            new = "ok"  # its finish was not heard (a lost callback), yet it runs fine again
        else:
            continue
        if new != (old or "ok"):
            changes.append((h, old, new))
    if not changes:
        return 0  # the idle tick: no write transaction at all
    recorded = 0
    with db.connected(), db.write_transaction():
        for h, old, new in changes:
            log_path = None
            if new == "stuck":
                log_path = (RunningInstance.select(RunningInstance.log_path)
                            .where((RunningInstance.cron == h["cron_id"]) & _OPEN)
                            .order_by(RunningInstance.id.desc()).limit(1).scalar())
            recorded += events.record_if(h["cron_id"], old, new, now, log_path=log_path,
                                         reason=h["reason"] or None)
    return recorded
