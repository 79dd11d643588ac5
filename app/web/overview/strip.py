"""A cron's strip: its newest executions and the firings of its schedule that have no
record (missed, late, skipped, or in a step of the clock), as health judges them."""
from __future__ import annotations

from qlshadow.watch import health
from qlshadow.i18n import _

STRIP = 20  # slots drawn in each cron's strip: executions and firings without one
_MINUTE = 60
_DAY = 86400
# The strip looks for firings without a record in growing windows back from now, so a
# cron firing every minute never evaluates a month of its schedule to draw 20 slots.
_STRIP_WINDOWS = (2 * 3600, 2 * _DAY, 31 * _DAY)


def _clock_steps(now: int) -> list:
    """The recorded clock steps as far back as a strip looks (a few rows, read whole)."""
    from qlshadow.watch.firing_times import clock_steps
    return clock_steps(now - _STRIP_WINDOWS[-1], now + 1)


def _execution_slot(e, newest: bool, found: dict) -> dict:
    """One execution as the strip draws it: kind, start, a label and, when stuck, since when.

    An open execution is drawn as health words it (health.condition): running, stuck, or
    finish lost.
    """
    slot = {"start": e.start, "since": None}
    word, since = _open_condition(e.start, e.open, newest, e.scheduled is not False, found)
    if word == "finish_lost":
        slot.update(kind="finish_lost", since=since,
                    label=_("finish lost: no finish was recorded, and a newer execution has "
                            "started"))
    elif word == "stuck":
        slot.update(kind="stuck", since=since,
                    label=_("still open, far longer than this cron usually runs"))
    elif word == "running":
        slot.update(kind="running", label=_("running"))
    elif e.exit_code is None:
        slot.update(kind="unknown", label=_("finished, exit code unknown"))
    else:
        slot.update(kind="ok" if e.exit_code == 0 else "failed",
                    label=_("exit {code}").format(code=e.exit_code))
    if e.scheduled is False:
        slot["label"] = _("{label} (manual run)").format(label=slot["label"])
    return slot


def _open_condition(start: int, is_open: bool, newest: bool, by_crond: bool,
                    found: dict) -> tuple:
    """(condition, since) of an execution as health judged it; (None, None) when it is
    closed. One older than health read falls back to the same rule: a newer one started."""
    if not is_open:
        return None, None
    known = (found.get("conditions") or {}).get(start)
    if known is not None:
        return known
    if not newest and by_crond and not found.get("overlapping"):
        return "finish_lost", start
    if found["state"] == "stuck":
        return "stuck", found["since"]
    return ("stuck", start) if not newest else ("running", start)


def strip_slots(cron: dict, executions: list, found: dict, schedules, now: int,
                n: int = STRIP, steps: list = ()) -> list:
    """The newest n slots, oldest first: each execution, and each firing of the schedule
    that has no record (missed once its grace ran out, late before; a clock step when it
    lies in a recorded step of the clock, as the gate and health judge it)."""
    from qlshadow.watch.firing_times import in_clock_step, is_active
    execs = sorted(executions, key=lambda e: e.start)
    slots = [_execution_slot(e, i == len(execs) - 1, found) for i, e in enumerate(execs)]
    grace = found.get("grace")
    limit = found.get("stuck_limit")
    if found["state"] != "unknown" and grace is not None and is_active(cron):
        # Judged as health judges: firings after the definition's last change, back to the
        # oldest execution read (older ones may have records that were not read).
        lo = max(cron["created_at"], cron["updated_at"]) + 1
        if execs:
            lo = max(lo, execs[0].start)
        starts = [e.start for e in execs]
        for window in _STRIP_WINDOWS:
            since = max(lo, now - window)
            # Every firing up to now: a record in a firing's own minute stands for that
            # firing, never for a gap before it (as the gate matches them).
            fires = schedules.between(cron["schedule"], since, now + 1)
            is_firing = set(fires).__contains__
            gaps = [f for f in fires if f < now - _MINUTE + 1
                    and not health.firing_started(f, starts, execs, grace, is_firing)]
            if since == lo or len(gaps) + sum(s >= since for s in starts) >= n:
                break
        for f in gaps:
            if (limit is not None and not found.get("overlapping")
                    and health.skipped_by_crond(f, execs, limit)):
                kind, label = "skipped", _("skipped (still running): crond does not start "
                                           "the line while its previous run is going")
            elif in_clock_step(f, steps):
                kind, label = "clock_step", _("no record, in a step of the host's clock: not missed")
            elif now >= health.missed_after(f, grace):
                kind, label = "missed", _("no record: missed")
            else:
                kind, label = "late", _("no record yet, still within its grace")
            slots.append({"start": f, "since": None, "kind": kind, "label": label})
    slots.sort(key=lambda s: s["start"])
    return slots[-n:]
