"""Task logs: a log's stamp read from its file name, and a cron's folder pruned to the count
and age kept (the newest log always stays)."""
from __future__ import annotations

import calendar
import os
import re

from qlshadow.storage.retention.policy import DAY, Policy

LOG_NAME = re.compile(r"(\d{4})-(\d\d)-(\d\d)-(\d\d)-(\d\d)-(\d\d)-\d+\.log")


def log_stamp(name: str) -> int | None:
    """Seconds (UTC reading of the local stamp; only compared) of a task log's file name."""
    match = LOG_NAME.fullmatch(name)
    if not match:
        return None
    y, mo, d, h, mi, s = (int(g) for g in match.groups())
    if not (1 <= mo <= 12 and 1 <= d <= 31):
        return None  # not a stamp task.sh writes: the file is left alone
    return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))


def prune_log_folder(folder: str, policy: Policy, now: int, limit: int | None) -> tuple:
    """Delete a cron's task logs beyond the count or age kept; returns (files, bytes).

    Only files named like task.sh names them are considered, newest first by that name;
    the newest is always kept (its task may still be writing to it).
    """
    try:
        names = sorted((n for n in os.listdir(folder) if log_stamp(n) is not None), reverse=True)
    except OSError:
        return 0, 0
    cutoff = now - policy.log_days * DAY if policy.log_days else None
    doomed = []
    for position, name in enumerate(names[1:], 1):
        if (policy.logs_per_cron and position >= policy.logs_per_cron) or (
                cutoff is not None and log_stamp(name) < cutoff):
            doomed.append(name)
    files = freed = 0
    for name in reversed(doomed):  # oldest first, so a bounded step takes the oldest
        if limit is not None and files >= limit:
            break
        path = os.path.join(folder, name)
        try:
            size = os.lstat(path).st_size
            os.unlink(path)
        except OSError:
            continue
        files += 1
        freed += size
    return files, freed
