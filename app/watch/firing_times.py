"""When BusyBox crond starts a 5-field line, and the host's clock steps (no Flask).

Schedules are matched by cronsim; this module only decides which wall-clock minutes map to
which instants (BusyBox crond tests every real minute by its local time: a minute in the
spring-forward gap never fires, one in the autumn repeat fires twice) and BusyBox's
day-of-month / day-of-week rule. docs/SHADOW.md explains both. The gate (watch/reconcile/)
and health (watch/health/) both judge firings with it.
"""
from __future__ import annotations

import calendar
import functools
import time

from qlshadow import timefmt
from qlshadow.storage.models import database
from qlshadow.core.schedule import field_count

DAY = 86400
MAX_WINDOW = 31 * DAY  # firings are enumerated one by one: keep a call bounded


def is_active(cron: dict) -> bool:
    """True when system mode writes the cron as an active crontab line (app/host/crontab/line.py)."""
    return (not cron["is_disabled"] and field_count(cron["schedule"]) == 5
            and cron["extra_schedules"] in (None, "", "[]"))


# --- firings ---------------------------------------------------------------------------------

class LocalClock:
    """The host's local time (libc's TZ, as crond sees it) between two instants.

    Holds the periods of constant UTC offset, so turning a wall-clock minute into the
    instants that show it is integer arithmetic: none in a spring-forward gap, two in an
    autumn repeat, one otherwise.
    """

    def __init__(self, lo: int, hi: int):
        periods = []
        start, offset = lo, time.localtime(lo).tm_gmtoff
        # Hourly samples find every change (no zone keeps an offset for under an hour);
        # each change is then narrowed to its second.
        t = lo
        while t < hi:
            step = min(3600, hi - t)
            after = time.localtime(t + step).tm_gmtoff
            if after != offset:
                a, b = t, t + step  # offset(a) == offset, offset(b) == after
                while b - a > 1:
                    mid = (a + b) // 2
                    if time.localtime(mid).tm_gmtoff == offset:
                        a = mid
                    else:
                        b = mid
                periods.append((start, b, offset))
                start, offset = b, after
            t += step
        periods.append((start, hi + 1, offset))
        self.periods = periods
        self.offsets = sorted({p[2] for p in periods})

    def covering(self, wall_lo: int, wall_hi: int) -> list:
        """The periods any instant showing a wall time in [wall_lo, wall_hi) can fall in."""
        return [p for p in self.periods
                if p[0] < wall_hi - self.offsets[0] and p[1] > wall_lo - self.offsets[-1]]

    def instants(self, wall: int) -> list:
        """Instants whose local time is `wall` (wall-clock seconds counted as if UTC)."""
        return [wall - off for lo, hi, off in self.periods if lo <= wall - off < hi]


def _day_rule(schedule: str) -> list:
    """cronsim expressions whose union matches the days BusyBox crond matches.

    BusyBox ignores a day field that holds every value and otherwise ORs day-of-month with
    day-of-week; Vixie cron (and cronsim) AND them when either field starts with '*'.
    They differ for e.g. '*/2' with a weekday, or '1-31' with a weekday.
    """
    from cronsim import CronSim
    from datetime import datetime
    fields = schedule.split()
    parsed = CronSim(schedule, datetime(2000, 1, 1))
    all_days = len(parsed.days) == 31
    all_weekdays = {d % 7 for d in parsed.weekdays} == set(range(7))
    if all_days:
        fields[2] = "*"
    if all_weekdays:
        fields[4] = "*"
    if all_days or all_weekdays or not (fields[2].startswith("*") or fields[4].startswith("*")):
        return [" ".join(fields)]
    # Both restricted, one written with a leading '*': OR them as two expressions.
    return [" ".join(fields[:4] + ["*"]), " ".join(fields[:2] + ["*", fields[3], fields[4]])]


@functools.lru_cache(maxsize=64)  # crons often share a time of day (*/5, 0 *, ...)
def _times_of_day(minute: str, hour: str) -> tuple:
    """Seconds after midnight of the wall-clock minutes the two fields match, by cronsim."""
    from cronsim import CronSim
    from datetime import datetime, timedelta
    day = datetime(2000, 1, 1)
    times = []
    for match in CronSim(f"{minute} {hour} * * *", day - timedelta(seconds=1)):
        if match.day != day.day:
            break
        times.append(match.hour * 3600 + match.minute * 60)
    return tuple(times)


def firings(schedule: str, lo: int, hi: int, clock: LocalClock) -> list:
    """The instants in [lo, hi) at which BusyBox crond starts a 5-field schedule, sorted."""
    # Lazy: only the gate needs a cron evaluator, never the callback path.
    from cronsim import CronSim
    from datetime import datetime, timedelta
    # A cron line matches a wall-clock minute when its day matches and its time of day
    # matches, independently; so cronsim is asked for the matching days of the window and
    # for the matching times of one day, instead of for every firing (a week of an
    # every-minute cron is 10,080 of them).
    times = _times_of_day(*schedule.split()[:2])
    epoch = datetime(1970, 1, 1)
    wall_lo = lo + clock.offsets[0]
    wall_hi = hi + clock.offsets[-1]
    first_day = (wall_lo - wall_lo % DAY) - DAY  # cronsim answers strictly after its start
    days = set()
    for expression in _day_rule(f"0 0 {' '.join(schedule.split()[2:])}"):
        for match in CronSim(expression, epoch + timedelta(seconds=first_day + DAY - 1)):
            wall = calendar.timegm(match.timetuple())
            if wall >= wall_hi:
                break
            days.add(wall)
    found = []
    for wall_day in sorted(days):
        periods = clock.covering(wall_day, wall_day + DAY)
        if len(periods) == 1:  # no offset change near this day: plain arithmetic
            shift = periods[0][2]
            found.extend(w - shift for w in (wall_day + t for t in times)
                         if lo <= w - shift < hi)
        else:
            for t in times:
                found.extend(i for i in clock.instants(wall_day + t) if lo <= i < hi)
    return sorted(set(found))


def next_firing(schedule: str, after: int, clock_hi: int) -> int | None:
    """The first firing after `after` within the next 31 days (for "needs" reasons)."""
    hi = min(clock_hi, after + MAX_WINDOW, timefmt.local_limit() - DAY)
    if hi <= after:
        return None
    found = firings(schedule, after, hi, LocalClock(after - DAY, hi + DAY))
    return found[0] if found else None


# --- clock steps -------------------------------------------------------------------------

def _sql(text: str) -> str:
    param = database.obj.param
    return text if param == "?" else text.replace("?", param)


# clock_steps is capped (runtime.STEPS_KEPT rows): a scan is bounded.
_STEPS = 'SELECT "lo", "hi", "step", "at" FROM "clock_steps" WHERE "hi" > ? AND "lo" < ?'


def clock_steps(since: int, until: int) -> list:
    """[(lo, hi, step, at)] of the recorded clock steps whose window meets [since, until)."""
    return sorted(tuple(row) for row in database.obj.execute_sql(_sql(_STEPS), (since, until)))


def in_clock_step(at: int, steps: list):
    """The clock step whose window holds the instant, or None: the one test of whether a
    firing is judged `clock step` (the gate, health and the page's strip all ask it)."""
    return next((step for step in steps if step[0] <= at < step[1]), None)
