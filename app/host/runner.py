"""Manual runs (docs/CONTRACT.md, "Manual runs"): start task.sh for a cron now, detached,
without the origin marker.

The runner reports through the same Legacy callbacks as a crond run, but it never makes
an execution_id (no marker), so a manual run is a RunningInstance and never a Shadow Run.
Its environment comes from the same task_env as a crontab line, so a manual run honours
the cron's work_dir, task_before and task_after exactly as a crond run does, and like a
crond run it carries no database URL and no token: task.sh reads those from the data dir.
"""
from __future__ import annotations

import os
import subprocess

from qlshadow.host.crontab import CrontabError, prepare_runner, shell_dir, task_env
from qlshadow.storage.db import connected
from qlshadow.errors import NotFound, Unavailable
from qlshadow.storage.models import Cron

# The intermediate shell backgrounds the task and exits at once; the task is re-parented
# to init, so the service neither waits for it nor leaves a zombie behind.
_DETACH = '"$@" </dev/null >/dev/null 2>&1 &'


def _rows(ids: list) -> dict:
    with connected():
        return {row["id"]: row for row in Cron.select().where(Cron.id.in_(ids)).dicts()}


def run_env(settings, cron: dict) -> dict:
    """The environment of a manual run: ours minus every QL_ setting (and any marker)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("QL_", "QL3_")) and k != "ID"}
    env.setdefault("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    env.update(task_env(settings, cron))
    return env


def start_manual(settings, ids: list) -> list:
    """Start one detached task.sh per cron id; NotFound (and nothing started) if one is unknown.

    ids are distinct, as parse.parse_ids gives them.
    """
    wanted = list(ids)
    rows = _rows(wanted)
    missing = [cron_id for cron_id in wanted if cron_id not in rows]
    if missing:
        raise NotFound(f"Cron {missing[0]} does not exist.")
    try:
        task = os.path.join(shell_dir(), "task.sh")
        # The runner token and runner.env that task.sh reads (the same as for crond runs).
        prepare_runner(settings)
    except CrontabError as exc:
        raise Unavailable(f"Manual runs are unavailable: {exc}.") from None
    for cron_id in wanted:
        cron = rows[cron_id]
        # The command is passed as one argument, so it needs no escaping; /bin/sh runs
        # task.sh so that a lost executable bit cannot stop it.
        argv = ["/bin/sh", "-c", _DETACH, "qlshadow-run", "/bin/sh", task, cron["command"]]
        subprocess.run(argv, env=run_env(settings, cron), stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       start_new_session=True, close_fds=True, check=True, timeout=30)
    return wanted
