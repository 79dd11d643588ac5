#!/usr/bin/env python3
"""WAL frames a Run's insert and its finish write, for shapes of the Run table.

    python3 scripts/run_shapes.py [--waves 30] [--crons 200] [--rows 520 150]
                                  [--page-sizes 4096 1024]

Plain sqlite3 in WAL mode, outside qlshadow: crond waves of `crons` Runs accepted in the same
second (their ids in hash order, as run ids are), each inserted in its own transaction, then
each finished by an update that grows the row a little. Frames are counted from the WAL's
growth, so checkpoints are off and the WAL is truncated between waves. For each table shape,
row size and page size it prints frames and WAL bytes per insert and per finish, after five
waves of warm-up (a 150-byte row is the slim Run, 520 the version-1 text row). It
answers "what would another key, another index or a slimmer row save" without changing the
product (docs/PERFORMANCE.md).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sqlite3
import tempfile

FRAME_HEADER = 24
SHAPES = {
    "key (accepted_at, id), index (cron_id, accepted_at, id) [shipped]": (
        "CREATE TABLE r (a INTEGER NOT NULL, id TEXT NOT NULL, cron INTEGER NOT NULL, "
        "body TEXT, PRIMARY KEY (a, id)) WITHOUT ROWID",
        "CREATE INDEX rc ON r (cron, a, id)"),
    "rowid table, unique (accepted_at, id), index (cron_id, accepted_at, id)": (
        "CREATE TABLE r (a INTEGER NOT NULL, id TEXT NOT NULL, cron INTEGER NOT NULL, "
        "body TEXT, UNIQUE (a, id))",
        "CREATE INDEX rc ON r (cron, a, id)"),
    "key (cron_id, accepted_at, id), unique (accepted_at, id)": (
        "CREATE TABLE r (a INTEGER NOT NULL, id TEXT NOT NULL, cron INTEGER NOT NULL, "
        "body TEXT, PRIMARY KEY (cron, a, id)) WITHOUT ROWID",
        "CREATE UNIQUE INDEX ra ON r (a, id)"),
    "key (accepted_at, id), no index (a bound: a cron's Runs unindexed)": (
        "CREATE TABLE r (a INTEGER NOT NULL, id TEXT NOT NULL, cron INTEGER NOT NULL, "
        "body TEXT, PRIMARY KEY (a, id)) WITHOUT ROWID",),
}
ROW_OVERHEAD = 70  # the key, the cron id and the record header, about


def measure(ddl, row_bytes: int, waves: int, crons: int, page_size: int = 4096) -> tuple:
    path = os.path.join(tempfile.mkdtemp(prefix="qlshadow-shapes-"), "runs.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA page_size={page_size}")
    conn.execute("PRAGMA journal_mode=wal")
    frame = page_size + FRAME_HEADER
    conn.execute("PRAGMA wal_autocheckpoint=0")
    for statement in ddl:
        conn.execute(statement)
    pad = "x" * (row_bytes - ROW_OVERHEAD)
    counted = {"insert": [0, 0], "finish": [0, 0]}

    def transaction(kind, sql, params, count):
        before = os.path.getsize(path + "-wal")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(sql, params)
        conn.execute("COMMIT")
        if count:
            counted[kind][0] += (os.path.getsize(path + "-wal") - before) / frame
            counted[kind][1] += 1

    for wave in range(waves):
        accepted = 1764460800 + 60 * wave
        ids = [hashlib.sha256(f"{wave}:{cron}".encode()).hexdigest()[:36] for cron in range(crons)]
        for cron, run_id in enumerate(ids):
            transaction("insert", "INSERT INTO r VALUES (?, ?, ?, ?)",
                        (accepted, run_id, cron, pad), wave >= 5)
        for run_id in ids:
            transaction("finish", "UPDATE r SET body = ? WHERE a = ? AND id = ?",
                        (pad + "y" * 16, accepted, run_id), wave >= 5)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    return tuple(round(total / n, 2) for total, n in counted.values())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waves", type=int, default=30, help="crond waves (default 30)")
    parser.add_argument("--crons", type=int, default=200, help="Runs per wave (default 200)")
    parser.add_argument("--rows", type=int, nargs="+", default=[520, 150],
                        help="row sizes in bytes (default 520, the text row, and 150, slim)")
    parser.add_argument("--page-sizes", type=int, nargs="+", default=[4096, 1024])
    args = parser.parse_args(argv)
    print(f"WAL frames (bytes) per transaction, {args.crons} Runs per wave, {args.waves} waves")
    for name, ddl in SHAPES.items():
        for page_size in args.page_sizes:
            for row_bytes in args.rows:
                insert, finish = measure(ddl, row_bytes, args.waves, args.crons, page_size)
                per = page_size + FRAME_HEADER
                print(f"  {insert:5.2f} ({insert * per:6.0f} B) insert  {finish:5.2f} "
                      f"({finish * per:6.0f} B) finish  {row_bytes:4d}-byte rows  "
                      f"{page_size:4d} B pages  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
