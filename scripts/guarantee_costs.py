#!/usr/bin/env python3
"""In-process CPU cost of the callback's guarantees (Shadow savepoint; one transaction per request).

Run: .venv/bin/python scripts/guarantee_costs.py  (SQLite in a temp dir; prints µs per callback).
"""
# The same callbacks through the fast path on one thread, with and without the savepoint.
import contextlib, io, json, sys, tempfile, time, uuid
from qlshadow import config, db
from qlshadow.shadow import writer
from qlshadow.views import create_app, fastpath
from qlshadow.auth import system_token
def setup():
    d = tempfile.mkdtemp()
    s = config.load(environ={"QL_DATA_DIR": d, "QL_DB_URL": f"sqlite:///{d}/q.db", "QL_SCHEDULER": "node",
        "QL_CRONTAB_INSTALL": "", "QL3_SHADOW_ORIGINS": "scheduled_system"})
    app = create_app(s)
    with db.database.connection_context(), db.write_transaction():
        tok = system_token(s.token_file)["value"]
    c = app.test_client()
    for i in range(200):
        c.post("/open/crons", json={"name": f"b{i}", "command": "x", "schedule": "* * * * *"}, headers={"Authorization": "Bearer " + tok})
    return fastpath.mount(app), tok
def bodies(k, n):
    out = []
    for i in range(n):
        eid = f"legacy-system:{1764460800 + k * 100000 + i}:{uuid.uuid4()}"
        for st in (0, 1):
            out.append(json.dumps({"ids": [str(i % 200 + 1)], "pid": "123", "log_path": f"/l/{k}-{i}.log",
                "execution_id": eid, "status": st, "last_execution_time": 1764460800, "last_running_time": 3, "exit_code": 0}).encode())
    return out
def run(w, tok, bs):
    sr = lambda *a: None
    t = time.process_time()
    for b in bs:
        w({"PATH_INFO": "/open/crons/status", "REQUEST_METHOD": "PUT", "CONTENT_LENGTH": str(len(b)),
           "wsgi.input": io.BytesIO(b), "wsgi.input_terminated": True, "HTTP_AUTHORIZATION": "Bearer " + tok}, sr)
    return (time.process_time() - t) / len(bs) * 1e6
w, tok = setup()
real_sp = writer.savepoint
res = {"savepoint": [], "no savepoint": []}
for k in range(6):
    writer.savepoint = real_sp if k % 2 == 0 else (lambda name: contextlib.nullcontext())
    res["savepoint" if k % 2 == 0 else "no savepoint"].append(run(w, tok, bodies(k, 1500)))
writer.savepoint = real_sp
import statistics
for k, v in res.items():
    print(f"{k:14} {statistics.median(v):7.1f} us CPU per callback  {[round(x) for x in v]}")
# One transaction per request vs one transaction for a group of 16 (what grouping would save):
conn = db.database.connection()
t = time.process_time()
for i in range(3000):
    conn.execute("BEGIN IMMEDIATE"); conn.execute("UPDATE crons SET pid = ? WHERE id = ?", (i, i % 200 + 1)); conn.execute("COMMIT")
one = (time.process_time() - t) / 3000 * 1e6
t = time.process_time()
for g in range(3000 // 16):
    conn.execute("BEGIN IMMEDIATE")
    for i in range(16):
        conn.execute("SAVEPOINT r"); conn.execute("UPDATE crons SET pid = ? WHERE id = ?", (i, i % 200 + 1)); conn.execute("RELEASE r")
    conn.execute("COMMIT")
grouped = (time.process_time() - t) / (3000 // 16 * 16) * 1e6
print(f"one-row update: own transaction {one:.1f} us; in a 16-request group with a savepoint each {grouped:.1f} us")
