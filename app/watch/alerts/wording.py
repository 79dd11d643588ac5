"""What an event's message says: its title and content (the cron, its state, the time, the
exit code, the failures in a row and the last lines of its log), in the server's language."""
from __future__ import annotations

import socket

from qlshadow.i18n import N_, _
from qlshadow.storage import db
from qlshadow.storage.models import AlertEvent, Cron
from qlshadow.watch.alerts.queueing import failures_in_a_row

LOG_LINES = 10
LOG_CHARS = 1500

# Whole sentences per state, so that each language words them in its own order.
_TITLES = {"failed": N_("{name} failed"), "missed": N_("{name} missed a firing"),
           "stuck": N_("{name} is stuck"), "ok": N_("{name} is ok again")}
_OPENINGS = {"failed": N_('Cron {id} "{name}" failed at {at}, on {host}.'),
             # The reason that follows names the firing; {at} would be when it was noticed.
             "missed": N_('Cron {id} "{name}" missed a firing, on {host}.'),
             "stuck": N_('Cron {id} "{name}" is stuck at {at}, on {host}.'),
             "ok": N_('Cron {id} "{name}" is ok again at {at}, on {host}.')}
_BEFORE = {"failed": N_("It was failed before."), "missed": N_("It was missed before."),
           "stuck": N_("It was stuck before.")}


def message(settings, event_id: int) -> tuple[str, str] | None:
    """(title, content) of an event: the cron, its state, the time, the exit code and the
    last lines of its log; None when the event is gone."""
    from qlshadow.timefmt import local_text
    with db.connected():
        event = (AlertEvent.select(AlertEvent, Cron.name, Cron.alert_after)
                 .join(Cron, on=(AlertEvent.cron == Cron.id))
                 .where(AlertEvent.id == event_id).dicts().get_or_none())
        if event is not None and event["state"] == "failed" and (event["alert_after"] or 1) > 1:
            event["in_a_row"] = failures_in_a_row(event["cron"], 1000)
    if event is None:
        return None
    name, state = event["name"], event["state"]
    opening = _(_OPENINGS[state]) if state in _OPENINGS else 'Cron {id} "{name}" ' + state + \
        " at {at}, on {host}."
    lines = [opening.format(id=event["cron"], name=name, at=local_text(event["at"]),
                            host=socket.gethostname())]
    previous = event["previous"]
    if previous not in (None, "ok") and state == "ok":
        lines.append(_(_BEFORE[previous]) if previous in _BEFORE
                     else f"It was {previous} before.")
    if event["exit_code"] is not None:
        lines.append(_("Exit code: {code}.").format(code=event["exit_code"]))
    if "in_a_row" in event:  # sent at the alert_after-th failure; the event is the first's
        lines.append(_("It has failed {count} times in a row (its alert_after).").format(
            count=event["in_a_row"]))
    if event["reason"]:
        lines.append(event["reason"])
    tail = log_tail(settings, event["log_path"])
    if tail:
        lines += ["", _("Last lines of its log ({path}):").format(path=event["log_path"]), tail]
    title = _(_TITLES[state]) if state in _TITLES else "{name} " + state
    return f"qlshadow: {title.format(name=name)}", "\n".join(lines)


def log_tail(settings, log_path) -> str:
    """The last LOG_LINES lines of a stored log path (at most LOG_CHARS), or ""."""
    if not log_path:
        return ""
    from qlshadow.host.logs import LogUnavailable, open_log, tail_lines
    try:
        with open_log(settings.log_dir, log_path) as fh:
            data, _ = tail_lines(fh, LOG_LINES)
    except (LogUnavailable, OSError):
        return ""
    text = data.decode("utf-8", "replace").rstrip("\n")
    return text if len(text) <= LOG_CHARS else "..." + text[-LOG_CHARS:]
