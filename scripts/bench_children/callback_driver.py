"""The callback path in one process, no HTTP: 20 crons, PAIRS running + finished
callbacks through callback.handle; prints CPU and bytes written per callback as JSON
(scripts/bench_notify.py, against this tree or, through PYTHONPATH, a baseline's).

Arguments: DATA_DIR PAIRS FLIP (1: every finish changes the exit code).
"""
import json
import sys
import time
from qlshadow.core import callback
from qlshadow import config
from qlshadow.storage import db
from qlshadow.storage.models import Cron
from qlshadow.core.runtime import Runtime

base, pairs, flip = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
settings = config.load(environ={"QL_DATA_DIR": base, "QL_DB_URL": f"sqlite:///{base}/q.db",
                                "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": ""})
database, _ = db.open_database(settings)
database.connect()
with db.write_transaction():
    ids = [Cron.insert(name=f"c{i}", command="true", schedule="*/5 * * * *", created_at=1,
                       updated_at=1).execute() for i in range(20)]
runtime = Runtime(settings)

def body(cron_id, status, pid, code):
    doc = {"ids": [cron_id], "status": status, "pid": pid, "log_path": f"c/{pid}.log",
           "last_execution_time": int(time.time())}
    if status == 1:
        doc.update(exit_code=code, last_running_time=1)
    return json.dumps(doc).encode()

def wchar():
    with open("/proc/self/io") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("wchar:"))

def play(n, offset):
    for k in range(n):
        cron_id, pid = ids[k % len(ids)], offset + k
        code = (k // len(ids)) % 2 if flip else 0
        callback.handle(body(cron_id, 0, pid, code), settings, runtime)
        callback.handle(body(cron_id, 1, pid, code), settings, runtime)

play(200, 10**6)  # warm: compiled statements, page cache, the writer's first checkpoint
w0, c0 = wchar(), time.process_time()
play(pairs, 0)
cpu, written = time.process_time() - c0, wchar() - w0
print(json.dumps({"callbacks": 2 * pairs, "cpu_us_per_callback": cpu / (2 * pairs) * 1e6,
                  "bytes_per_callback": written / (2 * pairs)}))
