"""The floor: a minimal Flask + waitress app with nothing of qlshadow in between (scripts/bench.py,
scripts/bench_page.py). FLOOR_WRITE_DB set: the write reference, one row updated per callback.
"""
import logging
import os
import peewee  # noqa: F401  (the product imports it: its import cost belongs to the floor)
from flask import Flask, Response, jsonify, request
from waitress.server import create_server

app = Flask("floor")
OK_BODY = b'{"code":200}\n'
WRITE_DB = os.environ.get("FLOOR_WRITE_DB")


@app.route("/open/crons/status", methods=["PUT", "POST"])
def status():
    raw = request.get_data(cache=False)
    if WRITE_DB:
        write(raw)
    return Response(OK_BODY, status=200, mimetype="application/json")


if WRITE_DB:
    # The write reference: the least any product can do per callback, one transaction that
    # updates one row (same pragmas, one connection under a lock, no ORM).
    import json
    import sqlite3
    import threading
    conn = sqlite3.connect(WRITE_DB, isolation_level=None, check_same_thread=False)
    for pragma in ("journal_mode=wal", "synchronous=normal", "cache_size=-512"):
        conn.execute("PRAGMA " + pragma)
    conn.execute("CREATE TABLE IF NOT EXISTS crons (id INTEGER PRIMARY KEY, status INTEGER, pid INTEGER)")
    conn.executemany("INSERT OR IGNORE INTO crons (id, status) VALUES (?, 1)",
                     [(i,) for i in range(1, 10001)])
    lock = threading.Lock()

    def write(raw):
        body = json.loads(raw)
        with lock:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE crons SET status = ?, pid = ? WHERE id = ?",
                         (int(body["status"]), int(body["pid"]), int(body["ids"][0])))
            conn.execute("COMMIT")


@app.route("/health", methods=["GET"])
def health():
    return jsonify(code=200, data={"status": "ok"})


logging.basicConfig(level=logging.INFO, format="floor: %(levelname)s %(name)s: %(message)s")
logging.getLogger("waitress.queue").setLevel(logging.ERROR)
server = create_server(app, host="127.0.0.1", port=int(os.environ.get("QL_PORT", "0")),
                       threads=int(os.environ.get("QL_THREADS", "4")),
                       max_request_body_size=1024 * 1024, ident="qlshadow",
                       clear_untrusted_proxy_headers=True)
print(f"floor serving http://127.0.0.1:{server.effective_port}", flush=True)
try:
    server.run()
except KeyboardInterrupt:
    pass
