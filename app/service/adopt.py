"""`qlshadow adopt`: the box's own crontab lines (outside every qlshadow block) become crons.

Listing changes nothing. Adopting takes the chosen lines out of the user's part and puts
them into our block as crons in one cron change (service/cron_change.py): one transaction, one
install, under the crontab lock, where the lines are read again and must still be as
listed. A line is adoptable when it means one thing to every cron daemon and the API would
take its schedule and command; the listing says why the others are not.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from qlshadow.host import crontab
from qlshadow.errors import InvalidInput

# Cron's shorthands that name a 5-field schedule; @reboot names none and is not adopted
# (our @boot is not a crontab line: crond would stop running it).
SHORTHANDS = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
              "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *",
              "@annually": "0 0 1 1 *"}
# `NAME=value` (Vixie cron also takes spaces around '=' and a quoted name).
_ASSIGNMENT = re.compile(r"\s*([\"']?)[A-Za-z_][A-Za-z0-9_]*\1\s*=")
_JOB = re.compile(r"\s*(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S.*)")
_QLSHADOW_MARK = re.compile(r"# (BEGIN|END) qlshadow (/.*)")
NAME_WORDS = 3
NAME_MAX = 64


@dataclass(frozen=True)
class Line:
    """One line of the user's part: its number in the crontab, its text, and either the
    schedule and command it would become or why it cannot be adopted."""
    number: int
    text: str
    schedule: str | None = None
    command: str | None = None
    problem: str | None = None


def _job(settings, number: int, text: str) -> Line:
    special, *rest = text.split(None, 1)
    if special.startswith("@"):
        schedule = SHORTHANDS.get(special.lower())
        if schedule is None:
            why = ("qlshadow's crontab lines run nothing at boot" if special.lower() == "@reboot"
                   else "not a schedule every cron daemon reads")
            return Line(number, text, problem=f"{special}: {why}")
        command = rest[0] if rest else ""
    else:
        match = _JOB.fullmatch(text)
        if not match:
            return Line(number, text, problem="not a cron line (5 fields and a command)")
        schedule, command = " ".join(match.groups()[:5]), match.group(6)
    command = command.rstrip()
    for char, why in (("%", "'%', a line break to Debian's cron and cronie"),
                      ("#", "'#', where BusyBox crond ends the line"),
                      ("\\", "a backslash, which cron daemons read differently")):
        if char in command:
            return Line(number, text, schedule, command,
                        f"the command holds {why}; add it with `qlshadow cron add`")
    from qlshadow.service.crons import validate
    try:
        values = validate({"name": default_name(command), "command": command,
                           "schedule": schedule}, partial=False)
        crontab.check_cron(settings, values)
    except (InvalidInput, crontab.CronTooLong) as exc:
        return Line(number, text, schedule, command, str(exc))
    return Line(number, text, values["schedule"], command)


def user_lines(settings, current: bytes) -> list:
    """The job and environment lines of the crontab outside every qlshadow block, numbered
    as in the crontab (comments and blank lines are left out)."""
    lines = current.splitlines()
    # Lines of an earlier qlshadow that owned the whole crontab are ours, not the user's.
    skip = crontab.old_whole_crontab_lines(settings, [t + b"\n" for t in lines])
    found, block = [], None
    for number, raw in enumerate(lines, 1):
        mark = _QLSHADOW_MARK.fullmatch(raw.rstrip().decode("utf-8", "replace"))
        if mark:
            # Any data dir's block, ours or another installation's: theirs to keep.
            block = mark.group(2) if mark.group(1) == "BEGIN" else None
            continue
        if block is not None or number - 1 in skip:
            continue
        try:
            text = raw.rstrip(b"\r").decode("utf-8")
        except UnicodeDecodeError:
            found.append(Line(number, raw.decode("utf-8", "replace"), problem="not UTF-8 text"))
            continue
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        if _ASSIGNMENT.match(text):
            found.append(Line(number, text, problem="an environment setting, not a job"))
            continue
        found.append(_job(settings, number, text))
    return found


def default_name(command: str) -> str:
    """A cron name from the command's first words."""
    return " ".join(command.split()[:NAME_WORDS])[:NAME_MAX]


def _require_system(settings) -> None:
    if (settings.scheduler != "system" or not settings.crontab_install.strip()
            or not settings.crontab_list.strip()):
        raise InvalidInput("adopt needs QL_SCHEDULER=system, QL_CRONTAB_INSTALL and "
                           "QL_CRONTAB_LIST: an adopted line runs from qlshadow's block in "
                           "the crontab it came from.")


def listing(settings) -> list:
    """The user's lines of the crontab as QL_CRONTAB_LIST prints it now."""
    _require_system(settings)
    return user_lines(settings, crontab.read_crontab(settings))


def chosen(listed: list, numbers: list) -> list:
    """The listed Lines with these numbers, in that order; refused when one is not an
    adoptable line or is named twice."""
    by_number = {line.number: line for line in listed}
    out = []
    for number in numbers:
        line = by_number.get(number)
        if number in [c.number for c in out]:
            raise InvalidInput(f"line {number} is named twice.")
        if line is None:
            raise InvalidInput(f"line {number} is not a job line of the crontab outside "
                               "qlshadow's block; `qlshadow adopt` lists them.")
        if line.problem:
            raise InvalidInput(f"line {number} cannot be adopted: {line.problem.rstrip('.')}.")
        out.append(line)
    return out


def adopt(settings, lines: list, names: list | None = None) -> tuple:
    """Make crons of these listed Lines and take them out of the user's part in one install.

    names give the crons' names in order (the rest: default_name). Under the crontab lock
    each line must still be at its number with the same text. Returns ([(Line, cron)],
    what was done where); a refusal raises InvalidInput with nothing written.
    """
    from qlshadow.service.crons import create
    _require_system(settings)
    names = list(names or [])
    if len(names) > len(lines):
        raise InvalidInput(f"{len(names)} names given for {len(lines)} lines: give at most "
                           "one --name per line.")
    names += [default_name(line.command) for line in lines[len(names):]]

    def take(current: bytes) -> tuple:
        now = {line.number: line for line in user_lines(settings, current)}
        for line in lines:
            if line.number not in now or now[line.number].text != line.text:
                raise InvalidInput(f"line {line.number} changed since it was listed; list "
                                   "again with `qlshadow adopt`.")
        return tuple((line.number, line.text.encode("utf-8")) for line in lines)

    def apply(planned):
        made = []
        for i, (line, name) in enumerate(zip(lines, names, strict=True)):
            try:
                made.append(create({"name": name, "command": line.command,
                                    "schedule": line.schedule}, settings,
                                   planned and planned[i]["id"]))
            except InvalidInput as exc:
                raise InvalidInput(f"line {line.number}: {exc}") from None
        return made

    from qlshadow.service.cron_change import change
    made, outcome = change(settings, apply, take)
    return list(zip(lines, made, strict=True)), outcome
