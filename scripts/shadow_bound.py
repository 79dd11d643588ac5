#!/usr/bin/env python3
"""The least a Shadow write can cost on SQLite, and so the best Shadow on ÷ off any design can reach.

    .venv/bin/python scripts/shadow_bound.py [--waves 4] [--repeats 5] [--off-us 281]

It records the exact statements qlshadow runs for crond waves (200 crons started in the
same second, then finished), running the callback fast path in-process with Shadow on. It
then replays them with no Python around them (plain sqlite3, the product's pragmas and
schema, one transaction per callback, checkpoints on) in cases that each keep a little
more of what Shadow writes:

  legacy                Shadow's statements removed: what a callback costs SQLite with Shadow off
  row                   plus the least a Run could be: a row of about 60 bytes keyed
                        (accepted_at, id), appended in arrival order, marked finished by an
                        update; no index, no savepoint
  row+savepoint         plus Shadow's fail-open savepoint around it
  row+sp+cron index     plus an index of a cron's Runs (listings and the per-cron cap use one)
  row+sp+index, 320 B   the same with a 320-byte row (a slimmer Run than the product's)
  row+sp+index, 520 B   the same with a 520-byte row (about the product's)
  product, appended     the product's own Shadow statements, with run ids in arrival order (as
                        if ids did not scatter the Runs of one second over the table)
  product               the product's statements as recorded

and, in the same alternation, the product itself in-process (Shadow on, and Legacy only).
Each case has its own copy of one database and the cases take turns batch by batch, so a
noisy neighbour hits them alike. It prints the wall and CPU time per callback of each case,
what each adds to `legacy`, and the Shadow on ÷ off that adding it to the product's own
Legacy-only time would leave: the best any design keeping that much can reach. With
--off-us (bench.py's `sqlite_off` server CPU per callback) it prints the same over HTTP.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import guarantee_costs  # noqa: E402  (its setup and its WSGI driver)

from qlshadow.storage import db  # noqa: E402

CRONS = guarantee_costs.CRONS
FIRST_SECOND = 1764500000


def wave_bodies(wave: int, shadow: bool) -> list:
    """A crond wave: every cron started in one second, then every one finished."""
    eids = [f"legacy-system:{FIRST_SECOND + 60 * wave}:{uuid.UUID(int=wave * CRONS + n + 1, version=4)}"
            for n in range(CRONS)]
    out = []
    for status in (0, 1):
        for n in range(CRONS):
            body = {"ids": [str(n + 1)], "pid": str(1000 + n), "status": status,
                    "log_path": f"/l/{wave}-{n}.log", "last_execution_time": FIRST_SECOND,
                    "exit_code": 0}
            if shadow:
                body["execution_id"] = eids[n]
            out.append(json.dumps(body).encode())
    return out


class _Recorder:
    """A driver connection that keeps every statement run through it, per callback."""

    def __init__(self, conn):
        self.conn, self.current = conn, []

    def cursor(self, *args):
        recorder, cursor = self, self.conn.cursor(*args)

        class Cursor:
            def execute(self, sql, params=()):
                recorder.current.append((sql, tuple(params)))
                return cursor.execute(sql, params)

            def __getattr__(self, name):
                return getattr(cursor, name)
        return Cursor()

    def execute(self, sql, params=()):
        return self.cursor().execute(sql, params)

    def __getattr__(self, name):
        return getattr(self.conn, name)


def _is_shadow(sql: str) -> bool:
    return "shadow_runs" in sql or sql.endswith('"shadow"')


BARE_RUNS = ("CREATE TABLE bare_runs (accepted_at INTEGER NOT NULL, id TEXT NOT NULL, "
             "cron_id INTEGER NOT NULL, finished INTEGER NOT NULL DEFAULT 0, body TEXT NOT NULL, "
             "PRIMARY KEY (accepted_at, id)) WITHOUT ROWID",)
BARE_CRON_INDEX = ("CREATE INDEX bare_runs_cron ON bare_runs (cron_id, accepted_at, id)",)
BARE_ROW = 60  # bytes of a bare Run with an empty body: its key, cron id, flag and header
EVENT = " exited@1764500100"
# The least-Run cases: (savepoint, cron index, bytes a Run takes), from the least up to the
# product's row size; then the product's own statements.
BARE_CASES = {
    "row": (False, False, BARE_ROW),
    "row+savepoint": (True, False, BARE_ROW),
    "row+sp+cron index": (True, True, BARE_ROW),
    "row+sp+index, 320 B": (True, True, 320),
    "row+sp+index, 520 B": (True, True, 520),
}
CASES = ("legacy", *BARE_CASES, "product, appended", "product")


def _bare(kind: str, key: tuple, savepoint: bool, row_bytes: int) -> list:
    if kind == "insert":
        statements = [("INSERT INTO bare_runs (accepted_at, id, cron_id, body) VALUES (?, ?, ?, ?)",
                       key + ("x" * (row_bytes - BARE_ROW),))]
    else:  # the finish marks it and grows it by an event, as the product's does
        statements = [("UPDATE bare_runs SET finished = 1, body = body || ? "
                       "WHERE accepted_at = ? AND id = ?", (EVENT,) + key[:2])]
    if savepoint:  # the writer's own savepoint statements
        shadow = db.savepoint("shadow")
        statements = [(shadow._begin, ())] + statements + [(shadow._release, ())]
    return statements


def cases_from(recorded: list) -> dict:
    """{case: (extra schema, [statements of each callback])} derived from the recorded ones."""
    from qlshadow.core.shadow import writer
    # Where each writer statement takes the run id, to put arrival-ordered ids in its place.
    id_slots = {}
    for statement in (writer._INSERT_RUN, writer._FINISH_RUN, writer._LOAD_RUN, writer._ADVANCE_RUN):
        sql, order = statement.sql(db.database.obj)
        id_slots[sql] = [i for i, (name, _) in enumerate(order) if name == "expected_id"]
    arrival: dict = {}
    out = {"legacy": ((), [])}
    for name, (_, index, _) in BARE_CASES.items():
        out[name] = (BARE_RUNS + (BARE_CRON_INDEX if index else ()), [])
    out["product, appended"] = ((), [])
    out["product"] = ((), [])
    for (wave, n, status), statements in recorded:
        legacy = [s for s in statements if not _is_shadow(s[0])]
        appended = []
        for sql, params in statements:
            if id_slots.get(sql):
                params = list(params)
                for i in id_slots[sql]:
                    params[i] = arrival.setdefault(params[i], f"{len(arrival):036d}")
                params = tuple(params)
            appended.append((sql, params))
        # The least Run: its key as the product's (seconds, a 36-character id), in arrival order.
        key = (FIRST_SECOND + 60 * wave, f"{wave * CRONS + n:036d}", n + 1)
        kind = "insert" if status == 0 else "update"
        body, commit = legacy[:-1], legacy[-1]
        assert commit[0] == "COMMIT", commit  # each callback is one transaction
        out["legacy"][1].append(legacy)
        for name, (savepoint, _, row_bytes) in BARE_CASES.items():
            out[name][1].append(body + _bare(kind, key, savepoint, row_bytes) + [commit])
        out["product, appended"][1].append(appended)
        out["product"][1].append(statements)
    return out


def _written() -> int:
    """Bytes this process has passed to write() so far: WAL frames and checkpoint copies."""
    with open("/proc/self/io") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("wchar:"))


def timed(run, items: list) -> tuple:
    """(wall us, CPU us, bytes written) per item to run(item) for every item."""
    wall, cpu, written = time.perf_counter(), time.process_time(), _written()
    for item in items:
        run(item)
    n = len(items)
    return ((time.perf_counter() - wall) / n * 1e6, (time.process_time() - cpu) / n * 1e6,
            (_written() - written) / n)


def replayer(conn):
    def run(statements):
        for sql, params in statements:
            conn.execute(sql, params).fetchall()
    return run


def open_copy(template: str, directory: str, name: str, schema: tuple, pragmas: dict):
    path = os.path.join(directory, name.replace(" ", "_").replace(",", "").replace("+", "_") + ".db")
    shutil.copyfile(template, path)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=wal")
    for pragma, value in pragmas.items():
        conn.execute(f"PRAGMA {pragma}={value}")
    for statement in schema:
        conn.execute(statement)
    return conn


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waves", type=int, default=4,
                        help="crond waves of 200 crons per batch (default 4: 1,600 callbacks)")
    parser.add_argument("--repeats", type=int, default=5, help="batches per case (default 5)")
    parser.add_argument("--off-us", type=float, default=None,
                        help="Shadow-off server CPU per callback over HTTP (bench.py's sqlite_off), "
                             "to print the same bound over HTTP")
    parser.add_argument("--pragma", action="append", default=[], metavar="NAME=VALUE",
                        help="replay with this SQLite pragma instead of the product's (a what-if; "
                             "the product cases keep theirs), e.g. cache_size=-2048")
    args = parser.parse_args(argv)
    pragmas = dict(db.SQLITE_PRAGMAS)
    pragmas.update(item.split("=", 1) for item in args.pragma)
    warmup = 2
    total = warmup + args.waves * args.repeats

    # The product on a scratch database, Shadow on: record what it runs for every wave.
    wsgi, token = guarantee_costs.setup()
    path = db.database.obj.database
    conn = db.database.connection()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    directory = os.path.dirname(path)
    template = os.path.join(directory, "template.db")
    shutil.copyfile(path, template)  # the schema and the crons, before any callback
    state = db.database.obj._state
    plain, recorder = state.conn, _Recorder(state.conn)
    recorded = []
    state.conn = recorder
    try:
        for wave in range(total):
            for k, body in enumerate(wave_bodies(wave, True)):
                recorder.current = []
                guarantee_costs.call(wsgi, token, body)
                recorded.append(((wave, k % CRONS, k // CRONS), recorder.current))
    finally:
        state.conn = plain
    cases = cases_from(recorded)
    per_batch = 2 * CRONS * args.waves

    # Every case on its own copy of the template; the product in-process on two more.
    conns = {name: open_copy(template, directory, name, schema, pragmas)
             for name, (schema, _) in cases.items()}
    figures = {name: [] for name in (*CASES, "product in-process, Shadow on",
                                     "product in-process, Legacy only")}
    guarantee_costs.cpu_per_callback(wsgi, token, guarantee_costs.bodies(999, 200, False))
    for name in CASES:
        timed(replayer(conns[name]), cases[name][1][:2 * CRONS * warmup])
    for batch in range(args.repeats):
        lo = 2 * CRONS * warmup + batch * per_batch
        for name in figures:
            if name in cases:
                figures[name].append(timed(replayer(conns[name]), cases[name][1][lo:lo + per_batch]))
            else:  # the product itself, on the database it was recorded on
                bodies = [body for w in range(args.waves) for body in
                          wave_bodies(total + batch * args.waves + w, name.endswith("on"))]
                figures[name].append(timed(lambda body: guarantee_costs.call(wsgi, token, body), bodies))
    report(figures, args, per_batch)
    # The replays wrote what the product did: every execution is one Run in each case.
    kept = {name: conn.execute("SELECT count(*) FROM " + (
        "shadow_runs" if name.startswith("product") else "bare_runs")).fetchone()[0]
        for name, conn in conns.items() if name != "legacy"}
    print("Runs kept after the replays: " + "; ".join(f"{name}: {n}" for name, n in kept.items())
          + f" (of {CRONS * total} executions; the product's retention keeps fewer)")
    for conn in conns.values():
        conn.close()
    db.database.close()
    shutil.rmtree(directory, ignore_errors=True)  # the databases: tens of MB a run
    return 0


def report(figures: dict, args, per_batch: int) -> None:
    """Medians of the batches; what a case adds is the median of its per-batch differences
    from `legacy` in the same turn (a slow spell of the disk hits both)."""
    def median(name, k=0):
        return statistics.median(v[k] for v in figures[name])

    def added(name, base):
        return statistics.median(v[0] - w[0] for v, w in zip(figures[name], figures[base], strict=True))

    on, off = "product in-process, Shadow on", "product in-process, Legacy only"
    off_us = median(off)
    print(f"Per callback, medians of {args.repeats} alternating batches of {per_batch} callbacks "
          f"({CRONS} crons started in one second, then finished), SQLite, one thread:")
    print(f"  {'case':28} {'wall us':>8} {'CPU us':>7} {'written':>8} {'adds':>7} "
          f"{'on/off in-process':>17}" + (f" {'on/off over HTTP':>16}" if args.off_us else ""))
    for name in figures:
        line = f"  {name:28} {median(name):8.1f} {median(name, 1):7.1f} {median(name, 2):8.0f}"
        if name in CASES and name != "legacy":
            more = added(name, "legacy")
            line += f" {more:7.1f} {off_us / (off_us + more):17.3f}"
            if args.off_us:
                line += f" {args.off_us / (args.off_us + more):16.3f}"
        elif name == on:
            ratio = statistics.median(w[0] / v[0] for v, w in zip(figures[on], figures[off], strict=True))
            line += f" {added(on, off):7.1f} {ratio:17.3f}"
        print(line)
    print("'written': bytes passed to write() per callback (WAL frames and checkpoint copies).\n"
          "'adds': wall time over 'legacy' (over 'Legacy only' for the product).\n"
          "'on/off': the product's own Legacy-only time over itself plus what the case adds: "
          "the best Shadow on / off\na design that writes that much can reach"
          + (f" (over HTTP: with {args.off_us:g} us per Shadow-off callback)." if args.off_us else "."))


if __name__ == "__main__":
    sys.exit(main())
