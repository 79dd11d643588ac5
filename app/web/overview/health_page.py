"""The health page: /health's document in words (sizes, the storage budget, times, write
failures) and the alert log with each delivery's outcome; size_text is every page's size."""
from __future__ import annotations

from qlshadow.i18n import N_, _


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
