"""What the status page shows, read from the tables (no Flask): bounded, read-only queries.

Times stay epoch seconds here; the page turns them into text in the viewer's chosen zone.
"""
from __future__ import annotations

import os

from qlshadow.watch import health
from qlshadow.i18n import N_, _
from qlshadow.storage.models import INSTANCE_RUNNING, Cron, ShadowFailure, cron_status_word

STRIP = 20  # slots drawn in each cron's strip: executions and firings without one
LOG_LINES = 20  # the last lines of a task log shown on a page,
LOG_BYTES = 8 * 1024  # read from at most this many bytes at the end of the file
_MINUTE = 60
_DAY = 86400
# The strip looks for firings without a record in growing windows back from now, so a
# cron firing every minute never evaluates a month of its schedule to draw 20 slots.
_STRIP_WINDOWS = (2 * 3600, 2 * _DAY, 31 * _DAY)
# Health states in words, the problems first: the order of the crons list.
STATE_WORDS = {"failed": N_("Failed"), "missed": N_("Missed a firing"), "stuck": N_("Stuck"),
               "late": N_("Late"), "running": N_("Running"), "new": N_("New, never ran"),
               "paused": N_("Paused"), "ok": N_("OK"), "unknown": N_("Not evaluated")}
_RANK = {state: i for i, state in enumerate(STATE_WORDS)}

# --- schedules in words -----------------------------------------------------------------
# cron-descriptor does this for every form, but costs about 0.4 MiB of RSS and would have
# to be bundled in the .ipk; the forms people actually write are a few lines.
_DAYS = (N_("every Sunday at {time}"), N_("every Monday at {time}"),
         N_("every Tuesday at {time}"), N_("every Wednesday at {time}"),
         N_("every Thursday at {time}"), N_("every Friday at {time}"),
         N_("every Saturday at {time}"), N_("every Sunday at {time}"))
_EVERY = {"second": (N_("every second"), N_("every {n} seconds")),
          "minute": (N_("every minute"), N_("every {n} minutes")),
          "hour": (N_("every hour"), N_("every {n} hours"))}
_DAY_NAMES = {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}


def _num(text: str, names=None) -> int | None:
    if names and text.lower() in names:
        return names[text.lower()]
    return int(text) if text.isascii() and text.isdigit() else None


def _every(text: str, unit: str) -> str | None:
    """'*' -> 'every unit', '*/N' -> 'every N units'; None for anything else."""
    one, many = _EVERY[unit]
    if text == "*":
        return _(one)
    if text.startswith("*/") and _num(text[2:]):
        n = int(text[2:])
        return _(one) if n == 1 else _(many).format(n=n)
    return None


def describe_schedule(schedule: str) -> str | None:
    """The schedule in plain words for the common forms, or None when it is unusual."""
    if schedule == "@once":
        return _("once, when added")
    if schedule == "@boot":
        return _("at every boot")
    fields = schedule.split()
    if len(fields) == 6:
        second, fields = fields[0], fields[1:]
        if second != "0":
            every = _every(second, "second")
            if every is None or fields != ["*"] * 5:
                return None
            return every
    if len(fields) != 5:
        return None
    minute, hour, dom, month, dow = fields
    if month != "*":
        return None
    if hour == "*" and dom == "*" and dow == "*":
        every = _every(minute, "minute")
        if every:
            return every
        m = _num(minute)
        return None if m is None else _("every hour at minute {minute}").format(minute=m)
    m, h = _num(minute), _num(hour)
    if m is None:
        return None
    if h is None:
        every = _every(hour, "hour")
        if every and dom == "*" and dow == "*":
            return _("{every} at minute {minute}").format(every=every, minute=m)
        return None
    at = f"{h:02d}:{m:02d}"
    if dom == "*" and dow == "*":
        return _("every day at {time}").format(time=at)
    if dom == "*":
        if dow in ("1-5", "mon-fri"):
            return _("on weekdays at {time}").format(time=at)
        d = _num(dow, _DAY_NAMES)
        return _(_DAYS[d]).format(time=at) if d is not None and d <= 7 else None
    if dow == "*":
        d = _num(dom)
        return (_("on day {day} of every month at {time}").format(day=d, time=at)
                if d is not None else None)
    return None


# --- crons ------------------------------------------------------------------------------

def _list_key(found: dict) -> tuple:
    # Problems in the order failed, missed, stuck, late, each newest first; then the rest
    # by state, newest cron first.
    problem = found["state"] in health.PROBLEMS
    return (_RANK.get(found["state"], len(_RANK)), -(found["since"] or 0) if problem else 0,
            -found["cron_id"])


def cron_rows(page: int, size: int, now: int, shadow: bool, daemon: str | None = None) -> dict:
    """One page of crons, problems first, each with its health and its strip."""
    found = sorted(health.read_all(now, shadow=shadow, daemon=daemon), key=_list_key)
    total = Cron.select().count()
    start = (page - 1) * size
    ids = [h["cron_id"] for h in found[start:start + size]]
    if len(ids) < size and total > len(found):
        # Past health's cap (health.MAX_CRONS, lowest ids): the newest crons, unevaluated.
        beyond = (Cron.select(Cron.id).where(Cron.id > max((h["cron_id"] for h in found), default=0))
                  .order_by(Cron.id.desc()).offset(max(0, start - len(found)))
                  .limit(size - len(ids)))
        ids += [row.id for row in beyond]
    by_id = {h["cron_id"]: h for h in found}
    crons = {c["id"]: c for c in Cron.select().where(Cron.id.in_(ids)).dicts()} if ids else {}
    recent = health.recent_executions(ids, shadow) if ids else {}
    schedules = health.Schedules(now)  # health's own firings reader, shared by every row
    steps = _clock_steps(now) if ids else []
    rows = []
    for cron_id in ids:
        cron = crons.get(cron_id)
        if cron is None:  # deleted between the two reads
            continue
        state = by_id.get(cron_id) or unevaluated(cron)
        rows.append(cron_summary(cron, recent.get(cron_id, []), state, schedules, now, steps))
    return {"rows": rows, "total": total}


def _clock_steps(now: int) -> list:
    """The recorded clock steps as far back as a strip looks (a few rows, read whole)."""
    from qlshadow.watch.firing_times import clock_steps
    return clock_steps(now - _STRIP_WINDOWS[-1], now + 1)


def cron_detail(cron: dict, now: int, shadow: bool, daemon: str | None = None) -> tuple:
    """(health, summary) of one cron, as its line in the list shows it."""
    found = health.read_all(now, shadow=shadow, cron_id=cron["id"], daemon=daemon)
    found = found[0] if found else unevaluated(cron)
    recent = health.recent_executions([cron["id"]], shadow)[cron["id"]]
    return found, cron_summary(cron, recent, found, health.Schedules(now), now,
                               _clock_steps(now))


def unevaluated(cron: dict) -> dict:
    """A health entry for a cron health did not evaluate (past its cap)."""
    return {"cron_id": cron["id"], "state": "unknown", "since": None, "next_expected": None,
            "last_success": None, "last_start": cron["last_execution_time"], "grace": None,
            "reason": _("Only the first {count} crons get a health state.").format(
                count=health.MAX_CRONS),
            "running_since": None}


def cron_summary(cron: dict, executions: list, found: dict, schedules, now: int,
                 steps: list = ()) -> dict:
    """The fields a cron's line on the page shows: its health and its strip."""
    status = cron_status_word(cron["status"])
    if cron["is_disabled"]:
        status = "disabled"
    finished = max((e for e in executions if not e.open), key=lambda e: e.start, default=None)
    duration = cron["last_running_time"]
    if duration is None and finished is not None and finished.end is not None:
        # The callback leaves last_running_time alone for a run under a second: the
        # execution's own times still say how long it ran.
        duration = max(0, finished.end - finished.start)
    return {
        "id": cron["id"], "name": cron["name"], "command": cron["command"],
        "schedule": cron["schedule"], "schedule_text": describe_schedule(cron["schedule"]),
        "status": status, "state": found["state"],
        "state_text": _(STATE_WORDS[found["state"]]) if found["state"] in STATE_WORDS
        else found["state"],
        "reason": found["reason"], "since": found["since"],
        "alert_mark": health.alert_mark_text(found),  # snoozed until T, quiet: nothing sent
        "next_expected": found["next_expected"], "last_success": found["last_success"],
        "last_start": found["last_start"] or cron["last_execution_time"],
        "grace": found["grace"], "last_duration": duration,
        "last_exit_code": finished.exit_code if finished else None,
        "strip": strip_slots(cron, executions, found, schedules, now, steps=steps),
    }


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


# --- one cron's executions ---------------------------------------------------------------

def cron_executions(cron_id: int, shadow: bool, limit: int, before: int | None,
                    found: dict) -> dict:
    """A cron's executions newest first, Runs and Legacy instances merged into one row each.

    {"rows": [...], "next_before": seconds or None}. An instance and a Run are one
    execution when the instance started in the second its Run was accepted (task.sh makes
    the execution id from that second), as health counts them. before= pages on: rows that
    started before that second.
    """
    from qlshadow.service.crons import list_instances
    from qlshadow.core.shadow import reader
    instances = list_instances(cron_id, None, limit + 1, None, until=before)
    runs = reader.list_runs(cron_id, None, limit + 1, None, until=before)
    partners: dict = {}
    for run in runs:
        partners.setdefault(run["accepted_at"], []).append(run)
    rows = []
    for instance in instances:
        same = partners.get(instance["started_at"])
        run = None
        if same:
            run = next((r for r in same if r["attempt"]["pid"] == instance["pid"]), same[0])
            same.remove(run)
        rows.append(_execution_row(instance, run, shadow))
    rows += [_execution_row(None, run, shadow) for left in partners.values() for run in left]
    rows.sort(key=lambda r: (r["start"], r["instance_id"] or 0), reverse=True)
    # Where a source has more rows than were read, rows older than its oldest one read
    # may lack their partner: they belong to the next page, as do rows past the limit.
    cuts = [min(x[key] for x in source) for source, key in
            ((instances, "started_at"), (runs, "accepted_at")) if len(source) > limit]
    if len(rows) > limit:
        cuts.append(rows[limit]["start"])
    next_before = None
    if cuts:
        cut = max(cuts)
        page = [r for r in rows if r["start"] > cut]
        next_before = cut + 1
        if not page:  # more than a page in one second: show a page of it, then go past it
            page, next_before = rows[:limit], cut
        rows = page
    for i, row in enumerate(rows):
        row["kind"], row["stuck_since"] = _row_kind(row, i == 0 and before is None, found)
    return {"rows": rows, "next_before": next_before}


def _execution_row(instance: dict | None, run: dict | None, shadow: bool) -> dict:
    """One execution from its instance, its Run, or both."""
    if instance is not None:
        start, pid, log_path = instance["started_at"], instance["pid"], instance["log_path"]
        finished, code = instance["finished_at"], instance["exit_code"]
        is_open = finished is None and instance["status"] == INSTANCE_RUNNING
    else:
        start, pid, log_path = run["accepted_at"], run["attempt"]["pid"], None
        finished, code, is_open = run["finished_at"], run["exit_code"], run["state"] != "exited"
    if run is not None:
        log_path = log_path or run["attempt"]["log_path"]
        if is_open and run["state"] == "exited":  # the instance's finish was lost, not the Run's
            finished, code, is_open = run["finished_at"], run["exit_code"], False
        pid = pid if pid is not None else run["attempt"]["pid"]
    if run is not None:
        origin = "scheduled"
    else:
        origin = "manual" if shadow else None  # with Shadow off nothing tells them apart
    duration = finished - start if finished is not None and finished >= start else None
    return {"start": start, "finished_at": finished, "exit_code": code, "open": is_open,
            "duration": duration, "pid": pid, "log_path": log_path, "origin": origin,
            "instance_id": instance["id"] if instance else None,
            "run_id": run["id"] if run else None, "run_state": run["state"] if run else None}


def _row_kind(row: dict, newest: bool, found: dict) -> tuple:
    """(kind, since) of one execution row, as the strip draws it."""
    word, since = _open_condition(row["start"], row["open"], newest, row["origin"] != "manual",
                                  found)
    if word is not None:
        return word, (since if word != "running" else None)
    if row["exit_code"] is None:
        return "unknown", None
    return ("ok" if row["exit_code"] == 0 else "failed"), None


# --- task logs ---------------------------------------------------------------------------

def log_tail(log_dir: str, stored: str | None, lines: int = LOG_LINES,
             limit: int = LOG_BYTES) -> dict:
    """The last lines of a task log, read only through app/host/logs.py, at most `limit` bytes.

    {"text", "name", "cut"} (cut: earlier lines are not shown), or {"error": one sentence}.
    """
    from qlshadow.host import logs
    if not stored:
        return {"error": _("Its callbacks named no log file.")}
    try:
        with logs.open_log(log_dir, stored) as fh:
            tail = logs.tail_bytes(fh, limit)
    except logs.LogUnavailable as exc:
        return {"error": _("The log cannot be read: {error}").format(error=exc)}
    text = tail["text"]
    found = text.splitlines()
    if tail["truncated"] and found:
        found = found[1:]  # the first line read is probably cut
    shown = found[-lines:] if lines else []
    return {"text": "\n".join(shown), "name": os.path.basename(stored),
            "cut": tail["truncated"] or len(found) > len(shown), "size": tail["size"]}


def cron_failures(cron_id: int, limit: int) -> list:
    """Shadow accept failures recorded for one cron, newest first."""
    query = (ShadowFailure.select().where(ShadowFailure.cron_id == cron_id)
             .order_by(ShadowFailure.id.desc()).limit(limit))
    return list(query.dicts())


# --- the health page ---------------------------------------------------------------------

def size_text(count: int | None) -> str:
    """Bytes for a person: B, KiB, MiB or GiB with one decimal."""
    if count is None:
        return "—"
    if count < 1024:
        return f"{count} B"
    for unit in ("KiB", "MiB", "GiB"):
        count /= 1024
        if count < 1024 or unit == "GiB":
            return f"{count:.1f} {unit}"
    return ""  # not reached


_LABELS = {
    "status": N_("Service"), "db": N_("Database"), "version": N_("Version"),
    "scheduler": N_("Scheduler"), "shadow_origins": N_("Shadow records"),
    "last_write": N_("Writes"), "storage": N_("Storage"), "crontab": N_("Crontab"),
    "db_bytes": N_("Database file"), "wal_bytes": N_("Write-ahead log"),
    "free_bytes": N_("Free on the data partition"),
    "synchronous": N_("Durability (synchronous)"), "used_bytes": N_("Storage budget"),
    "log_bytes": N_("Task logs"),
}
_SYNCHRONOUS = {0: "off", 1: "normal", 2: "full", 3: "extra"}


def label_of(key: str) -> str:
    """A person's label for a key of /health (known ones named, others made readable)."""
    return _(_LABELS[key]) if key in _LABELS else key.replace("_", " ").capitalize()


def health_rows(data: dict, when) -> list:
    """/health's document as [(label, text, css class)] for people: no True/False, sizes in
    KiB/MiB, the budget as a percentage, times through when(seconds). Keys it does not know
    are shown with a readable label and a readable value."""
    rows = []
    for key, value in data.items():
        if key == "storage" and isinstance(value, dict):
            rows.append((label_of(key), _storage_text(value), ""))
            continue
        rows.append((label_of(key), *_health_value(key, value, when)))
    return rows


def _health_value(key: str, value, when) -> tuple:
    if key == "status":
        return (_("OK") if value == "ok" else str(value).capitalize(),
                "ok" if value == "ok" else "failed")
    if key == "db":
        return (_("answers") if value == "ok" else str(value),
                "ok" if value == "ok" else "failed")
    if key == "shadow_origins":
        if not value:
            return _("off: crond's runs are kept as Legacy instances only"), "muted"
        return _("on for {origins} (crond's runs become Shadow Runs)").format(
            origins=", ".join(value)), ""
    if key == "scheduler":
        words = {"system": N_("system crond (our block of the crontab)"),
                 "node": N_("node (nothing written to a crontab)")}
        return (_(words[value]) if value in words else str(value)), ""
    if key == "last_write" and isinstance(value, dict):
        if value.get("ok"):
            return _("succeeding"), "ok"
        cause = value.get("cause") or _("unknown cause")
        text = (_("failing since {since}: {cause} ({count} failed)") if value.get("since")
                else _("failing: {cause} ({count} failed)"))
        return text.format(since=when(value["since"]) if value.get("since") else "",
                           cause=cause, count=value.get("failures", 0)), "failed"
    if key == "crontab":
        return str(value), "ok" if value == "installed" else (
            "failed" if str(value).startswith("not installed") else "")
    return _plain(key, value, when), ""


def _plain(key: str, value, when) -> str:
    """Any other value in words: yes/no, sizes, times, lists and mappings."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return _("yes") if value else _("no")
    if isinstance(value, int) and key.endswith("bytes"):
        return size_text(value)
    if isinstance(value, int) and (key in ("since", "at") or key.endswith("_at")):
        return when(value)
    if isinstance(value, dict):
        return "; ".join(f"{label_of(k).lower()}: {_plain(k, v, when)}"
                         for k, v in value.items()) or "—"
    if isinstance(value, (list, tuple)):
        return ", ".join(_plain(key, v, when) for v in value) or _("none")
    return str(value)


def _storage_text(storage: dict) -> list:
    """The storage figures as [(label, text)], the budget's use as a percentage."""
    items = []
    used, budget = storage.get("used_bytes"), storage.get("budget_bytes")
    for key, value in storage.items():
        if key == "budget_bytes":
            continue
        if key == "used_bytes":
            if used is None:
                text = _("not measured (PostgreSQL keeps its own files)")
            elif budget:
                text = _("{used} of {budget} ({share} %)").format(
                    used=size_text(used), budget=size_text(budget),
                    share=f"{100 * used / budget:.0f}")
            else:
                text = _("{used} used, no budget set (QL_STORAGE_BUDGET)").format(
                    used=size_text(used))
        elif key == "synchronous":
            text = _SYNCHRONOUS.get(value, str(value)) if value is not None else \
                "— (PostgreSQL)"
        elif value is None and key in ("db_bytes", "wal_bytes", "log_bytes"):
            text = "— (PostgreSQL)" if key != "log_bytes" else "—"
        else:
            text = _plain(key, value, str)
        items.append((label_of(key), text))
    return items


# A delivery's outcome in words (alerts.notify_log).
OUTCOME_WORDS = {"sent": N_("sent"), "pending": N_("failed, will retry"),
                 "given_up": N_("given up"), "new": N_("not sent: no channel configured"),
                 "too_old": N_("not sent: too old"),
                 "held_back": N_("not sent: its alert tuning held it until the problem ended")}


ALERT_WORDS = {"failed": N_("failed"), "missed": N_("missed"), "stuck": N_("stuck"),
               "ok": N_("ok")}


def notification_log(limit: int) -> list:
    """The alert log, newest first: each event with its delivery per channel."""
    from qlshadow.watch.alerts import notify_log
    rows = notify_log(limit)
    for row in rows:
        row["state_text"] = (_(ALERT_WORDS[row["state"]]) if row["state"] in ALERT_WORDS
                             else row["state"])
        row["outcome_text"] = (_(OUTCOME_WORDS[row["outcome"]]) if row["outcome"] in OUTCOME_WORDS
                               else row["outcome"])
    return rows
