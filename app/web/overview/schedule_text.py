"""Schedules in plain words, for the forms people actually write."""
from __future__ import annotations

from qlshadow.i18n import N_, _

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
