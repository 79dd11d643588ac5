"""`log`: the end of an execution's task log, and with -f what it writes until it finishes."""
from __future__ import annotations

import sys

from qlshadow.cli.common import cron_id_of, open_db
from qlshadow.cli.errors import CliError
from qlshadow.core.shadow import reader
from qlshadow.service import crons


def _log_source(args) -> tuple:
    """(what, stored log path, finished() -> bool) of the execution the options name."""
    from qlshadow.storage.models import Cron, RunningInstance, ShadowRun
    if args.cron is not None:
        args.cron = cron_id_of(args.cron)
    if args.run_id is not None:
        run = reader.get_run(args.run_id) if reader.UUID_TEXT.fullmatch(args.run_id) else None
        if run is None:
            raise CliError(f"Run {args.run_id} does not exist")
        key = (ShadowRun.accepted_at == run["accepted_at"]) & (ShadowRun.id == run["id"])

        def run_finished() -> bool:
            row = ShadowRun.select(ShadowRun.finished_at).where(key).tuples().get_or_none()
            return row is None or row[0] is not None
        return f"Run {run['id']}", run["attempt"]["log_path"], run_finished
    if args.instance is not None:
        instance = RunningInstance.get_or_none(RunningInstance.id == args.instance)
        if instance is None:
            raise CliError(f"instance {args.instance} does not exist")
    else:
        crons.get(args.cron)
        instance = (RunningInstance.select().where(RunningInstance.cron == args.cron)
                    .order_by(RunningInstance.id.desc()).first())
        if instance is None:  # its instances were pruned: the cron keeps its last log path
            return f"cron {args.cron}", Cron.get_by_id(args.cron).log_path, lambda: True
    instance_id = instance.id

    def instance_finished() -> bool:
        row = (RunningInstance.select(RunningInstance.status)
               .where(RunningInstance.id == instance_id).tuples().get_or_none())
        return row is None or row[0] != 0
    return f"instance {instance_id}", instance.log_path, instance_finished


# Seconds between two looks at a followed log and its execution's state.
FOLLOW_POLL = 0.5


def cmd_log(args) -> int:
    """The last lines of an execution's task log; with -f, what it writes until it finishes."""
    import time

    from qlshadow.host import logs
    settings, database = open_db(args, create=False)
    with database.connection_context():
        what, stored, finished = _log_source(args)
        if not stored:
            raise CliError(f"{what} has no log: its callbacks named none")
        try:
            fh = logs.open_log(settings.log_dir, stored)
        except logs.LogUnavailable as exc:
            raise CliError(f"{what}: {exc}") from None
        with fh:
            text, offset = logs.tail_lines(fh, args.lines)
            out = sys.stdout.buffer
            out.write(text)
            out.flush()
            if not args.follow:
                return 0
            # It ends at the first look after the execution finished that finds nothing new:
            # task.sh writes its last line before the idle callback, so none is missed.
            # Ctrl-C ends it too (main answers KeyboardInterrupt with exit 130).
            while True:
                done = finished()
                fh.seek(offset)
                chunk = fh.read()
                if chunk:
                    out.write(chunk)
                    out.flush()
                    offset += len(chunk)
                elif done:
                    return 0
                else:
                    time.sleep(FOLLOW_POLL)
