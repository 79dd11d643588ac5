"""Fill a product database with crons and finished Runs (scripts/bench.py's slow-work
servers); prints the ids of the crons it made.

Arguments: CRONS RUNS OLD_RUNS; the QL_* environment names the database.
"""
import itertools
import sys
import time
from qlshadow import config
from qlshadow.storage import db
from qlshadow.storage.models import Cron
from qlshadow.core.shadow.ids import attempt_id, revision_doc, run_id, task_revision
crons, runs, old = map(int, sys.argv[1:4])
database, _ = db.open_database(config.load())
with database.connection_context():
    slim = "request_uuid" in {c.name for c in database.get_columns("shadow_runs")}
if slim:
    from qlshadow.storage.schema import MOVED as COLUMNS, _slim as stored
else:  # a tree from before the slim Run (--baseline): every logical field
    COLUMNS = ("accepted_at", "id", "request_id", "cron_id", "task_revision", "origin",
               "state", "pid", "log_path", "started_at", "finished_at", "exit_code", "events",
               "project_id", "idempotency_key", "attempt_id", "task_identity",
               "trigger_type", "triggered_by", "execution_owner", "recorded_at")

    def stored(row):
        at, run, eid, cron_id = row[:4]
        return row + ("default", eid, attempt_id(eid, at), f"legacy-cron:{cron_id}",
                      "scheduled_system", "legacy:system-crond", "legacy", at)
now = int(time.time())
# Each Run as the writer of this tree stores it (its logical fields, made slim where it can).
insert = db.prebuilt('INSERT INTO "shadow_runs" (' + ", ".join(f'"{c}"' for c in COLUMNS)
                     + ") VALUES (" + ", ".join("?" * len(COLUMNS)) + ")")


def revision_of(name, command):
    try:
        return task_revision(revision_doc(name, command, "* * * * *"))
    except TypeError:  # the older signature: every definition field in order
        return task_revision(revision_doc(name, command, "* * * * *", None, None, None, None,
                                          None, 0))
made = now - 60 * 86400
with database.connection_context():
    with database.atomic():
        cron_ids = []
        for n in range(crons):
            name, command = f"slow {n}", f"task slow_{n}.sh"
            cron_ids.append((Cron.insert(name=name, command=command, schedule="* * * * *",
                                         created_at=made, updated_at=made).execute(),
                             revision_of(name, command)))

    def plan(count, end):
        for minute in itertools.count(1):
            at = (end // 60 - minute) * 60 + 1
            for cron_id, revision in cron_ids:
                if count == 0:
                    return
                count -= 1
                eid = f"legacy-system:{at}:{cron_id:08x}-0000-4000-8000-{minute:012x}"
                yield stored((at, run_id(eid, at), eid, cron_id, revision,
                                    "scheduled_system", "exited", 1000 + cron_id,
                                    f"slow_{cron_id}/{at}.log", at, at + 2, 0,
                                    f"accepted@{at} spawned@{at} running@{at} exited@{at + 2}"))

    for count, end in ((runs, now), (old, now - 40 * 86400)):
        rows = plan(count, end)
        while True:
            batch = list(itertools.islice(rows, 50000))
            if not batch:
                break
            with database.atomic():
                database.cursor().executemany(insert, batch)
print(" ".join(str(cron_id) for cron_id, _ in cron_ids))
