#!/usr/bin/env python3
"""In-process CPU cost of what each callback pays for a guarantee, in microseconds.

    .venv/bin/python scripts/guarantee_costs.py [--callbacks 1500] [--repeats 3]

Drives the app (its callback route, views/callback.py) directly as WSGI, on one thread, against a
fresh SQLite database in a temp dir, with Shadow on: no HTTP and no other thread, so a
difference of a few microseconds is visible where a throughput ratio over HTTP moves by
several per cent between rounds. Each comparison alternates batches of the two cases in
one process and reports the median CPU time per callback of each:

  shadow     a callback with an execution_id (Shadow writes its Run), or one without
  savepoint  the Shadow write inside its fail-open savepoint, or without one
  metrics    the callback and Shadow counters of /metrics, or no-ops in their place
  grouping   a one-row update in its own transaction, or 16 of them in one transaction
             with a savepoint each (what "one transaction per request" costs)

With --statements it also prints the CPU time of each kind of SQL statement per callback,
Shadow on and off, timed around the driver's cursor. With --frames it prints the WAL frames
(pages written) per running and per idle callback, Shadow on and off, by the table or index
each page belongs to: every frame is a 4 KiB write, and every 256 of them a checkpoint with
its fsyncs.
"""
from __future__ import annotations

import argparse
import atexit
import collections
import dataclasses
import io
import json
import shutil
import sqlite3
import statistics
import struct
import sys
import tempfile
import time
import uuid

from qlshadow import config
from qlshadow.storage import db
from qlshadow.core.counters import Uncounted
from qlshadow.core.runtime import KEY as RUNTIME_KEY
from qlshadow.core.auth import system_token
from qlshadow.web.views import create_app

CRONS = 200


def setup():
    """The WSGI app on a fresh database with CRONS crons, and a bearer token."""
    data_dir = tempfile.mkdtemp(prefix="qlshadow-costs-")
    atexit.register(shutil.rmtree, data_dir, True)  # the database goes with the run
    settings = config.load(environ={
        "QL_DATA_DIR": data_dir, "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": "",
        "QL3_SHADOW_ORIGINS": "scheduled_system"})
    app = create_app(settings)
    with db.database.connection_context(), db.write_transaction():
        token = system_token(settings.token_file)["value"]
    client = app.test_client()
    for n in range(CRONS):
        client.post("/open/crons", json={"name": f"job{n}", "command": "true",
                                         "schedule": "* * * * *"},
                    headers={"Authorization": f"Bearer {token}"})
    return app, token


def bodies(batch: int, executions: int, shadow: bool = True) -> list:
    """Running then idle callbacks of `executions` crond executions, each with its own id
    (without an execution_id when not shadow: Legacy only)."""
    out = []
    for n in range(executions):
        execution_id = f"legacy-system:{1764460800 + batch * 100000 + n}:{uuid.uuid4()}"
        for status in (0, 1):
            body = {"ids": [str(n % CRONS + 1)], "pid": "123", "log_path": f"/l/{batch}-{n}.log",
                    "status": status, "last_execution_time": 1764460800,
                    "last_running_time": 3, "exit_code": 0}
            if shadow:
                body["execution_id"] = execution_id
            out.append(json.dumps(body).encode())
    return out


def _answered(status, headers):
    if not status.startswith("200"):
        raise RuntimeError(f"callback answered {status}")


def call(wsgi, token: str, body: bytes) -> None:
    """Answer one callback body through the WSGI app, as waitress would hand it over."""
    wsgi({"PATH_INFO": "/open/crons/status", "REQUEST_METHOD": "PUT",
          "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body),
          "wsgi.input_terminated": True, "HTTP_AUTHORIZATION": f"Bearer {token}"}, _answered)


def cpu_per_callback(wsgi, token: str, batch: list) -> float:
    """CPU microseconds per callback to answer every body of batch."""
    started = time.process_time()
    for body in batch:
        call(wsgi, token, body)
    return (time.process_time() - started) / len(batch) * 1e6


def nothing():
    pass


def alternate(wsgi, token: str, cases: dict, executions: int, repeats: int, batch0: int) -> dict:
    """Median CPU per callback of each case.

    cases maps a name to (switch on, switch off) or (switch on, switch off, shadow bodies).
    """
    figures = {name: [] for name in cases}
    for k in range(repeats * len(cases)):
        name = list(cases)[k % len(cases)]
        enter, leave, *shadow = cases[name]
        batch = bodies(batch0 + k, executions, *shadow)
        enter()
        try:
            figures[name].append(cpu_per_callback(wsgi, token, batch))
        finally:
            leave()
    return {name: statistics.median(values) for name, values in figures.items()}


class _TimedCursor:
    """A driver cursor whose execute() adds its CPU time to a table keyed by statement."""

    def __init__(self, cursor, table):
        self._cursor, self._table = cursor, table

    def execute(self, sql, params=()):
        started = time.process_time()
        try:
            return self._cursor.execute(sql, params)
        finally:
            entry = self._table[" ".join(sql.split()[:4])[:60]]
            entry[0] += 1
            entry[1] += time.process_time() - started

    def __getattr__(self, name):
        return getattr(self._cursor, name)


class _TimedConnection:
    def __init__(self, conn, table):
        self._conn, self._table = conn, table

    def cursor(self, *args):
        return _TimedCursor(self._conn.cursor(*args), self._table)

    def execute(self, sql, params=()):
        return self.cursor().execute(sql, params)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def statements(wsgi, token: str, executions: int) -> None:
    """Print CPU per callback of each kind of statement, Shadow on and off."""
    state = db.database.obj._state
    plain = state.conn
    for shadow in (True, False):
        table = collections.defaultdict(lambda: [0, 0.0])
        batch = bodies(200 + shadow, executions, shadow)
        state.conn = _TimedConnection(plain, table)
        try:
            cpu_per_callback(wsgi, token, batch)
        finally:
            state.conn = plain
        print(f"statements per callback, {'Shadow on' if shadow else 'Legacy only'}:")
        for sql, (count, seconds) in sorted(table.items(), key=lambda item: -item[1][1]):
            print(f"  {seconds / len(batch) * 1e6:7.1f} us  {count / len(batch):5.2f} x  {sql}")


def _wal_pages(path: str) -> list:
    """The page number of every frame now in the WAL (32-byte header, 24 bytes a frame)."""
    with open(path + "-wal", "rb") as fh:
        data = fh.read()
    size = struct.unpack(">I", data[8:12])[0] if len(data) >= 32 else 4096
    return [struct.unpack(">I", data[at:at + 4])[0] for at in range(32, len(data) - 23, size + 24)]


def frames(wsgi, token: str) -> None:
    """Print WAL frames per running and per idle callback, by b-tree, Shadow on and off."""
    path = db.database.obj.database
    conn = db.database.connection()
    conn.execute("PRAGMA wal_autocheckpoint=0")  # keep every frame of a wave in the WAL
    for shadow in (True, False):
        for wave in range(3):  # the last wave is reported: the first ones grow the tables
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            eids = [f"legacy-system:{1764470000 + shadow * 1000 + wave * 60}:{uuid.uuid4()}"
                    for _ in range(CRONS)]
            marks = [0]
            for status in (0, 1):
                for n in range(CRONS):
                    body = {"ids": [str(n + 1)], "pid": str(1000 + n), "status": status,
                            "log_path": f"/l/f{shadow}-{wave}-{n}.log", "exit_code": 0}
                    if shadow:
                        body["execution_id"] = eids[n]
                    cpu_per_callback(wsgi, token, [json.dumps(body).encode()])
                marks.append(len(_wal_pages(path)))
        pages = _wal_pages(path)
        reader = sqlite3.connect(path)
        owner = {page: name for name, page in reader.execute("SELECT name, pageno FROM dbstat")}
        reader.close()
        print(f"WAL frames per callback, {'Shadow on' if shadow else 'Legacy only'} "
              f"({CRONS} crons firing together):")
        for label, part in (("running", pages[marks[0]:marks[1]]), ("idle", pages[marks[1]:marks[2]])):
            where = collections.Counter(owner.get(page, "freed") for page in part)
            detail = ", ".join(f"{name} {count / CRONS:.2f}" for name, count in where.most_common())
            print(f"  {label:8} {len(part) / CRONS:5.2f}  ({detail})")
    conn.execute(f"PRAGMA wal_autocheckpoint={db.WAL_CHECKPOINT_PAGES}")


def grouping(rows: int = 3200) -> tuple:
    """(one-row update in its own transaction, in a 16-request group) in microseconds."""
    conn = db.database.connection()
    started = time.process_time()
    for i in range(rows):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE crons SET pid = ? WHERE id = ?", (i, i % CRONS + 1))
        conn.execute("COMMIT")
    alone = (time.process_time() - started) / rows * 1e6
    started = time.process_time()
    for _ in range(rows // 16):
        conn.execute("BEGIN IMMEDIATE")
        for i in range(16):
            conn.execute("SAVEPOINT r")
            conn.execute("UPDATE crons SET pid = ? WHERE id = ?", (i, i % CRONS + 1))
            conn.execute("RELEASE r")
        conn.execute("COMMIT")
    grouped = (time.process_time() - started) / (rows // 16 * 16) * 1e6
    return alone, grouped


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callbacks", type=int, default=1500,
                        help="crond executions per batch (two callbacks each; default 1500)")
    parser.add_argument("--repeats", type=int, default=3, help="batches per case (default 3)")
    parser.add_argument("--statements", action="store_true",
                        help="also the CPU time of each kind of SQL statement per callback")
    parser.add_argument("--frames", action="store_true",
                        help="also the WAL frames (pages written) per callback, by table and index")
    args = parser.parse_args(argv)

    wsgi, token = setup()
    cpu_per_callback(wsgi, token, bodies(999, 500))  # warm up: statements, caches, pages

    shadow = alternate(wsgi, token, {
        "Shadow on": (nothing, nothing, True),
        "Legacy only": (nothing, nothing, False),
    }, args.callbacks, args.repeats, 200)

    # The app reads its settings per request (app.extensions["qlshadow"]): each case hands
    # it settings with one parameter changed, and the shipped ones back after.
    shipped = wsgi.extensions["qlshadow"]

    def with_settings(**changes):
        return (lambda: wsgi.extensions.update(qlshadow=dataclasses.replace(shipped, **changes)),
                lambda: wsgi.extensions.update(qlshadow=shipped))

    savepoint = alternate(wsgi, token, {
        "with the savepoint": (nothing, nothing),
        "without it": with_settings(shadow_savepoint=False),
    }, args.callbacks, args.repeats, 0)

    # Counters are the app's Runtime's: Uncounted in its place counts nothing.
    runtime = wsgi.extensions[RUNTIME_KEY]
    counting = runtime.counters

    def counters_off():
        runtime.counters = Uncounted()

    def counters_back():
        runtime.counters = counting

    counters = alternate(wsgi, token, {
        "metrics on": (nothing, nothing),
        "metrics off": (counters_off, counters_back),
    }, args.callbacks, args.repeats, 100)

    alone, grouped = grouping()
    print(f"CPU per callback, one thread, SQLite, Shadow on (medians of {args.repeats} "
          f"alternating batches of {2 * args.callbacks} callbacks):")
    for name, value in {**shadow, **savepoint, **counters}.items():
        print(f"  {name:20} {value:8.1f} us")
    print(f"  Shadow's cost        {shadow['Shadow on'] - shadow['Legacy only']:8.1f} us")
    print(f"  savepoint cost       {savepoint['with the savepoint'] - savepoint['without it']:8.1f} us")
    print(f"  metrics on / off callbacks per CPU second "
          f"{counters['metrics off'] / counters['metrics on']:.4f}")
    print(f"one-row update: its own transaction {alone:.1f} us; "
          f"in a 16-request group with a savepoint each {grouped:.1f} us")
    if args.statements:
        statements(wsgi, token, args.callbacks)
    if args.frames:
        frames(wsgi, token)
    return 0


if __name__ == "__main__":
    sys.exit(main())
