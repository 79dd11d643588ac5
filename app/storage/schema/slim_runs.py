"""Step 2 (version 1 to 2): the slim Run row (models.ShadowRun). The step only renames and
creates; move_old_runs, at this and every later start, moves the Runs in batches with
frozen copies of how the step stored them (never the live id code of core/shadow)."""
from __future__ import annotations

import logging

from peewee import Database, DatabaseError, SqliteDatabase

from qlshadow.storage.models import ShadowRun
from qlshadow.storage.peewee_compat import create_table
from qlshadow.storage.schema.helpers import add_indexes, first_line, schema_lock

log = logging.getLogger("qlshadow")

OLD_RUNS_TABLE = "shadow_runs_v1"
MOVE_BATCH_MAX = 200  # Runs moved per transaction: a bounded WAL and a bounded loss on a full disk


def step_slim_runs(db: Database) -> str:
    """Version 2: the slim Run row (models.ShadowRun). Only renames and creates: the Runs
    move to the new table in batches afterwards (move_old_runs), each batch deleted from
    the old table in its own transaction, so a nearly full disk never needs room for a
    copy of the whole table and an interrupted move just goes on at the next start."""
    db.execute_sql(f'ALTER TABLE "shadow_runs" RENAME TO "{OLD_RUNS_TABLE}"')
    sqlite = isinstance(db, SqliteDatabase)
    if not sqlite:  # the old key's and index's names go with it, free for the new ones
        db.execute_sql(f'ALTER TABLE "{OLD_RUNS_TABLE}" RENAME CONSTRAINT "shadow_runs_pkey" '
                       f'TO "{OLD_RUNS_TABLE}_pkey"')
        db.execute_sql(f'ALTER INDEX "shadow_runs_cron" RENAME TO "{OLD_RUNS_TABLE}_cron"')
    create_table(ShadowRun)
    if not sqlite:
        add_indexes(ShadowRun)
    # SQLite cannot rename an index, and dropping a full one writes each of its pages, which
    # a nearly full disk may not have room for: the old index goes with its emptied table,
    # and the new one is made then (move_old_runs).
    return f"shadow_runs slimmed: its Runs move from {OLD_RUNS_TABLE} in batches"


# What the slimming step stores, frozen as the step was written: a later change to the live
# id code (core/shadow) must not change how an old database upgrades.
_SLIM_ORIGINS = ("scheduled_system",)  # a Run's origin is stored as its position here


def _uuid_bytes(text: str) -> bytes:
    """The 16 bytes of a UUID written as lowercase text."""
    return bytes.fromhex(text.replace("-", ""))


def _slim(row: tuple) -> tuple:
    """A version-1 Run row (MOVE_COLUMNS order) in the slim table's columns (MOVED order)."""
    (accepted, run, request, cron, revision, origin, state, pid, log_path, started, finished,
     exit_code, events) = row
    first = events.split(None, 3)  # accepted@t spawned@t [running@t] ...
    created = int(first[0].partition("@")[2])
    running = 1 if len(first) > 2 and first[2].startswith("running@") else 0
    if state == "exited" and finished is None:  # the slim row's state is "has finished_at"
        finished = int(events.rpartition("@")[2])
    elif state != "exited":
        finished = None
    return (accepted, _uuid_bytes(run), _uuid_bytes(request.rsplit(":", 1)[1]), cron,
            bytes.fromhex(revision), _SLIM_ORIGINS.index(origin), pid, log_path,
            None if started is None else started - accepted, finished, exit_code, created - accepted, running)


def _driver_errors(db: Database) -> tuple:
    """The DB-API error classes of the database's driver."""
    if isinstance(db, SqliteDatabase):
        import sqlite3
        return (sqlite3.Error,)
    import psycopg2
    return (psycopg2.Error,)


MOVE_COLUMNS = ("accepted_at", "id", "request_id", "cron_id", "task_revision", "origin",
                "state", "pid", "log_path", "started_at", "finished_at", "exit_code", "events")
MOVED = ("accepted_at", "id", "request_uuid", "cron_id", "task_revision", "origin",
         "pid", "log_path", "started_after", "finished_at", "exit_code", "created_after",
         "created_running")


def move_old_runs(db: Database, batch: int = MOVE_BATCH_MAX) -> int:
    """Move the Runs of a version-1 table into the slim one, newest first, in batches.

    Each batch is one transaction that inserts the slim rows and deletes the old ones, so
    the pages it frees hold the next batch and the file does not grow on a full disk.
    Newest first: if the disk fills anyway, the history kept is the newest. Stops at the
    first error (logged) and goes on at the next start. Returns the Runs moved.
    """
    if not db.table_exists(OLD_RUNS_TABLE):
        return 0
    q = "?" if isinstance(db, SqliteDatabase) else "%s"
    columns = ", ".join(f'"{c}"' for c in MOVE_COLUMNS)
    select = (f'SELECT {columns} FROM "{OLD_RUNS_TABLE}" '
              f'ORDER BY "accepted_at" DESC, "id" DESC LIMIT {int(batch)}')
    insert = (f'INSERT INTO "shadow_runs" ({", ".join(f"{chr(34)}{c}{chr(34)}" for c in MOVED)}) '
              f'VALUES ({", ".join([q] * len(MOVED))}) ON CONFLICT DO NOTHING')
    delete = f'DELETE FROM "{OLD_RUNS_TABLE}" WHERE "accepted_at" = {q} AND "id" = {q}'
    moved = 0
    try:
        while True:
            # Under the schema lock: several processes starting at once take turns.
            with schema_lock(db):
                if not db.table_exists(OLD_RUNS_TABLE):  # another process ended the move
                    break
                rows = db.execute_sql(select).fetchall()
                if not rows:
                    db.execute_sql(f'DROP TABLE "{OLD_RUNS_TABLE}"')
                    add_indexes(ShadowRun)  # SQLite's, once the old one's name is free
                    break
                cursor = db.cursor()
                cursor.executemany(insert, [_slim(r) for r in rows])
                cursor.executemany(delete, [(r[0], r[1]) for r in rows])
            moved += len(rows)
            if isinstance(db, SqliteDatabase):
                # Back into the file's freed pages now: the WAL of a few batches would be
                # more than a nearly full disk has room for.
                db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    except (DatabaseError, *_driver_errors(db)) as exc:  # executemany is the driver's own
        log.warning("moving Runs to the slim table stopped after %d: %s; it goes on at the "
                    "next start", moved, first_line(exc))
        return moved
    if moved:
        log.warning("%d Runs moved to the slim table", moved)
    return moved
