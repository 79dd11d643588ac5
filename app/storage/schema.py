"""The database schema: a version stored in the database and the ordered steps that reach it.

Start-up (db.open_database) reads the version once; the callback path never looks at it.
A database with no tables is created at the latest version and stamped. A database with
tables but no version comes from a release before versions (version 0) and is brought up
step by step. Each step is one transaction that also writes its version, taken under an
advisory lock on PostgreSQL and BEGIN IMMEDIATE on SQLite, so two processes starting at
once run each step once, and a failed step (a full disk, say) leaves the database at the
version before it, intact.

To change the schema: change the models (they describe the latest version, what a fresh
database gets), then append one step to STEPS that makes the same change on a database of
the version before it. A table the first step creates comes from today's models, so a
step checks before it adds (the helpers below skip what is already there).
"""
from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from contextlib import contextmanager

from peewee import (BigIntegerField, CompositeKey, Database, DatabaseError, IntegerField,
                    SqliteDatabase, TextField)

from qlshadow.errors import Unavailable
from qlshadow.storage.models import (ALL_MODELS, AlertDelivery, AlertEvent, App, BaseModel,
                                     Claim, ClockStep, Cron, Host, HostBoot, RunningInstance,
                                     ServiceOutage, ShadowFailure, ShadowRun, Token, database)
from qlshadow.storage.peewee_compat import create_indexes, create_table, set_without_rowid

log = logging.getLogger("qlshadow")

VERSION_TABLE = "schema_version"
PG_LOCK_KEY = 4460446  # pg_advisory_xact_lock key: one schema change at a time per database
# SQLite page size of a new database: slim Runs fill 1 KiB pages, where 4 KiB pages made a
# callback rewrite four times the bytes (docs/STORAGE.md has the measurements).
PAGE_SIZE = 1024
UPGRADE_WAIT_MS = 120_000  # another process's upgrade (a re-key copies the Run table) may be slow


class SchemaError(Unavailable):
    """The database's schema is not one this code can use or bring up to date."""


class NotMounted(Unavailable):
    """The data dir or database would be created under a mount point not mounted yet."""
    exit_status = 75  # EX_TEMPFAIL: the service starts again when the mount appears


# Mount points the host is configured to mount: OpenWrt's block-mount, then any fstab.
FSTABS = ("/etc/config/fstab", "/etc/fstab")


def _unescape(path: str) -> str:
    """An fstab path with its octal escapes (\\040 for a space) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def mount_targets(fstab: str) -> list:
    """The mount points a fstab (or OpenWrt's UCI /etc/config/fstab) lists, "/" left out."""
    try:
        with open(fstab, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return []
    targets = []
    if "config " in text:  # UCI: `config mount` sections with `option target`
        for section in re.split(r"^\s*config\s", text, flags=re.M)[1:]:
            options = dict(re.findall(r"^\s*option\s+(\w+)\s+['\"]?([^'\"\n]*)['\"]?",
                                      section, flags=re.M))
            if section.split()[0] == "mount" and options.get("enabled", "1") != "0":
                targets.append(options.get("target", ""))
    else:
        for line in text.splitlines():
            fields = line.split()
            if len(fields) >= 3 and not fields[0].startswith("#") and fields[2] != "swap":
                targets.append(_unescape(fields[1]))
    return [os.path.normpath(t) for t in targets if t.startswith("/") and os.path.normpath(t) != "/"]


def check_mounted(settings) -> None:
    """Refuse to create the data directory or the SQLite database under a configured mount
    point not mounted yet (every command asks first, before it touches either).

    Started before its disk (a USB stick) is mounted, the service would create the data
    directory, its files and an empty database on the filesystem beneath the mount point
    and keep writing there, hidden once the disk is mounted. What exists already is never
    refused: it was made on purpose.
    """
    from qlshadow.config import sqlite_file
    for what, path in (("the data directory", settings.data_dir),
                       ("the database", sqlite_file(settings.db_url))):
        if path is None or os.path.exists(path):
            continue
        where = os.path.realpath(os.path.abspath(path))
        for fstab in FSTABS:
            for target in mount_targets(fstab):
                if (where == target or where.startswith(target + os.sep)) \
                        and not os.path.ismount(target):
                    raise NotMounted(f"{target} is a mount point in {fstab} that is not "
                                     f"mounted: not creating {what} {path} beneath it; start "
                                     "again once it is mounted")


# --- helpers for steps: each skips what is already there ------------------------------------

def add_table(db: Database, model) -> None:
    """Create the model's table with its indexes if the table is missing."""
    db.create_tables([model], safe=True)


def add_indexes(model) -> None:
    """Create those of the model's declared indexes that are missing (by name)."""
    create_indexes(model)


def add_column(db: Database, model, field_name: str) -> None:
    """Add the model's column if the table lacks it (nullable, or with a default)."""
    from playhouse.migrate import SchemaMigrator, migrate
    field = model._meta.fields[field_name]
    table = model._meta.table_name
    if field.column_name not in {c.name for c in db.get_columns(table)}:
        migrate(SchemaMigrator.from_database(db).add_column(table, field.column_name, field))


# --- frozen tables: a table as a shipped version had it, for the steps that build it --------

class RunV1(BaseModel):
    """shadow_runs at version 1: every field of the Run stored, as text."""
    project_id = TextField()
    idempotency_key = TextField()
    id = TextField()
    attempt_id = TextField()
    request_id = TextField()
    task_identity = TextField()
    cron_id = BigIntegerField()
    task_revision = TextField()
    origin = TextField()
    trigger_type = TextField()
    triggered_by = TextField()
    execution_owner = TextField()
    accepted_at = BigIntegerField()
    state = TextField()
    pid = BigIntegerField(null=True)
    log_path = TextField(null=True)
    started_at = BigIntegerField(null=True)
    finished_at = BigIntegerField(null=True)
    exit_code = IntegerField(null=True)
    events = TextField()
    recorded_at = BigIntegerField()

    class Meta:
        table_name = "shadow_runs"
        primary_key = CompositeKey("accepted_at", "id")


RunV1.add_index(RunV1.index(RunV1.cron_id, RunV1.accepted_at, RunV1.id, name="shadow_runs_cron"))

# --- the steps ------------------------------------------------------------------------------

# The tables of version 1: later steps add theirs.
V1_MODELS = (Cron, RunningInstance, App, Token, ShadowRun, ShadowFailure)


def _step_release_before_versions(db: Database) -> str | None:
    """Version 1: the schema of the last release without a version, from any older one."""
    done = None
    if db.table_exists("shadow_runs") and \
            db.get_primary_keys("shadow_runs") == ["project_id", "idempotency_key"]:
        done = _rekey_runs(db)
    set_without_rowid(RunV1, isinstance(db, SqliteDatabase))
    for model in V1_MODELS:
        add_table(db, RunV1 if model is ShadowRun else model)
    add_indexes(RunningInstance)
    add_indexes(RunV1)
    return done


def _rekey_runs(db: Database) -> str:
    """Re-key an older shadow_runs by (accepted_at, id), keeping every row.

    Older databases keyed it by (project_id, idempotency_key), with an (accepted_at, id)
    index for the order that is now the key itself (models.ShadowRun).
    """
    if isinstance(db, SqliteDatabase):
        # SQLite cannot change a table's key: the rows are copied into a new table, which
        # needs as much free space again as the table while it runs.
        columns = ", ".join(f'"{f.column_name}"' for f in RunV1._meta.sorted_fields)
        db.execute_sql('ALTER TABLE "shadow_runs" RENAME TO "shadow_runs_old"')
        for index in db.get_indexes("shadow_runs_old"):  # they moved with the table
            if index.sql:  # not a key's own index, which goes with the table
                db.execute_sql(f'DROP INDEX "{index.name}"')
        set_without_rowid(RunV1, True)
        db.create_tables([RunV1])
        db.execute_sql(f'INSERT INTO "shadow_runs" ({columns}) '
                       f'SELECT {columns} FROM "shadow_runs_old"')
        db.execute_sql('DROP TABLE "shadow_runs_old"')
    else:
        db.execute_sql('ALTER TABLE "shadow_runs" DROP CONSTRAINT "shadow_runs_pkey", '
                       'ADD PRIMARY KEY ("accepted_at", "id")')
        db.execute_sql('DROP INDEX IF EXISTS "shadow_runs_accepted"')
    rows = db.execute_sql('SELECT COUNT(*) FROM "shadow_runs"').fetchone()[0]
    return f"shadow_runs re-keyed by (accepted_at, id), {rows} Runs kept"


OLD_RUNS_TABLE = "shadow_runs_v1"
MOVE_BATCH_MAX = 200  # Runs moved per transaction: a bounded WAL and a bounded loss on a full disk


def _step_slim_runs(db: Database) -> str:
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
            with _locked(db):
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
                    "next start", moved, _first_line(exc))
        return moved
    if moved:
        log.warning("%d Runs moved to the slim table", moved)
    return moved


def _step_cron_grace(db: Database) -> None:
    """Version 3: a cron's own grace period (health.py), null for the default."""
    add_column(db, Cron, "grace")


def _step_alerts(db: Database) -> None:
    """Version 4: the crons' last alerted state, the alert events and their deliveries."""
    add_column(db, Cron, "alert_state")
    add_table(db, AlertEvent)
    add_table(db, AlertDelivery)
    add_indexes(AlertEvent)
    add_indexes(AlertDelivery)


def _step_host_clock(db: Database) -> None:
    """Version 5: each host's boot (Runs open at a reboot are closed) and the clock steps."""
    add_table(db, HostBoot)
    add_table(db, ClockStep)


def _step_alert_tuning(db: Database) -> None:
    """Version 6: the crons' alert tuning (alert_after, max_runtime, quiet, snooze_until),
    all null: every existing cron keeps alerting as before."""
    for name in ("alert_after", "max_runtime", "quiet", "snooze_until"):
        add_column(db, Cron, name)


def _step_service_outage(db: Database) -> None:
    """Version 7: the service outages the tick found (watch/outage.py)."""
    add_table(db, ServiceOutage)


def _step_hosts(db: Database) -> str | None:
    """Version 8: the fleet: the hosts table, each cron's hosts and hosts mode, the claims of `one`
    crons, and the host of each Run and instance. Crons from before keep running where
    they ran, on every host that shares the database (["*"])."""
    add_table(db, Host)
    add_table(db, Claim)
    for name in ("hosts", "hosts_mode"):
        add_column(db, Cron, name)
    add_column(db, RunningInstance, "host_id")
    add_column(db, ShadowRun, "host_id")
    kept = db.execute_sql('UPDATE "crons" SET "hosts" = \'["*"]\' WHERE "hosts" IS NULL').rowcount
    if kept:
        return (f"{kept} cron(s) from before hosts were named run on every host sharing the "
                'database (hosts ["*"]), as they did')
    return None


# (what the step does, in words that follow "cannot" in an error; the step). Step n brings
# version n - 1 to version n and returns a line to log once it is committed, or None.
# Append only: never reorder or edit a step that has shipped. Step 1 builds tables from
# today's models, except shadow_runs, which it builds from the frozen RunV1: a later step
# that changes a table's columns must first give the earlier steps a frozen copy of it.
STEPS = (
    ("re-key shadow_runs by (accepted_at, id)", _step_release_before_versions),
    ("slim shadow_runs", _step_slim_runs),
    ("add the crons' grace column", _step_cron_grace),
    ("add the alert tables", _step_alerts),
    ("add the host boot and clock step tables", _step_host_clock),
    ("add the crons' alert tuning columns", _step_alert_tuning),
    ("add the service outage record", _step_service_outage),
    ("add hosts and the crons' host fields", _step_hosts),
)
LATEST = len(STEPS)


# --- start-up ---------------------------------------------------------------------------------

def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def upgrade_schema(cause: Callable[[BaseException], str] = _first_line,
                   host_name: str | None = None) -> str:
    """Bring the bound database to the latest version (fresh: create and stamp it).

    Returns the journal mode on SQLite ("wal" unless the filesystem refused it), "" otherwise.
    Raises SchemaError, with one line that says why, when the version is newer than this
    code's or a step fails; cause(error) words a failed step's error (db.failure_cause).
    """
    db = database.obj
    sqlite = isinstance(db, SqliteDatabase)
    set_without_rowid(ShadowRun, sqlite)
    mode = ""
    with db.connection_context():
        if sqlite:
            # A page size holds only from the file's first write; an existing database
            # keeps its own (changing it takes a VACUUM: free space the size of the file).
            if db.execute_sql("PRAGMA page_count").fetchone()[0] == 0:
                db.execute_sql(f"PRAGMA page_size = {getattr(db, 'page_size', None) or PAGE_SIZE}")
            mode = db.execute_sql("PRAGMA journal_mode=wal").fetchone()[0].lower()
        if _current(db) == LATEST and not _missing_tables(db):  # the usual start: no lock
            move_old_runs(db)
            _note_boot(db, host_name)
            return mode
        if sqlite:
            waited = db.execute_sql("PRAGMA busy_timeout").fetchone()[0]
            db.execute_sql(f"PRAGMA busy_timeout = {max(waited, UPGRADE_WAIT_MS)}")
        try:
            _upgrade(db, cause)
            move_old_runs(db)
        finally:
            if sqlite:
                db.execute_sql(f"PRAGMA busy_timeout = {waited}")
        _note_boot(db, host_name)
    return mode


def _note_boot(db: Database, host_name: str | None = None) -> None:
    """Close the Runs a reboot left open (storage/reboot.py); a failure only delays it.
    host_name: QL_HOST_NAME (None: the system's)."""
    from qlshadow.storage.reboot import note_boot
    try:
        note_boot(db, host=host_name)
    except DatabaseError as exc:
        log.warning("cannot record this boot, so Runs left open by a reboot stay open until "
                    "the next start: %s", _first_line(exc))


def check_version() -> None:
    """Refuse a database whose schema is newer than this code (read-only opens)."""
    db = database.obj
    if not db.is_closed():  # a caller's open connection
        _current(db)
        return
    with db.connection_context():
        _current(db)


def _current(db: Database) -> int | None:
    """The stored version; 0 for a release before versions, None for an empty database."""
    if db.table_exists(VERSION_TABLE):
        version = db.execute_sql(f'SELECT "version" FROM "{VERSION_TABLE}"').fetchone()[0]
    elif db.table_exists("crons"):
        version = 0
    else:
        return None
    if version > LATEST:
        raise SchemaError(f"the database's schema is version {version}, newer than this "
                          f"qlshadow's {LATEST}: run the release that wrote it, or a later one")
    return version


def _missing_tables(db: Database) -> list:
    """The models' tables that a database at the latest version lacks."""
    present = set(db.get_tables())
    return [m._meta.table_name for m in ALL_MODELS if m._meta.table_name not in present]


@contextmanager
def _locked(db: Database):
    """A write transaction that holds the schema lock until it ends."""
    if isinstance(db, SqliteDatabase):
        with db.atomic("IMMEDIATE"):
            yield
        return
    with db.atomic():
        db.execute_sql("SELECT pg_advisory_xact_lock(%s)", (PG_LOCK_KEY,))
        yield


def _upgrade(db: Database, cause: Callable[[BaseException], str]) -> None:
    ran = 0
    while True:
        version, done = None, None
        try:
            with _locked(db):
                # Read again under the lock: another process may have gone ahead meanwhile.
                version = _current(db)
                if version == LATEST:
                    missing = _missing_tables(db)
                    if missing:  # dropped by hand: made again empty, as `db init` promises
                        db.create_tables([m for m in ALL_MODELS
                                          if m._meta.table_name in missing])
                        log.warning("missing table(s) created again: %s", ", ".join(missing))
                    return
                if version is None:
                    db.create_tables(ALL_MODELS)
                else:
                    done = STEPS[version][1](db) or f"schema upgraded to version {version + 1}"
                _stamp(db, LATEST if version is None else version + 1)
        except DatabaseError as exc:  # the step, or the COMMIT (a full disk fails there)
            what = ("create the tables" if version is None or version == LATEST
                    else STEPS[version][0])
            left = ("the database is unchanged" if ran == 0 else
                    f"the database stays at schema version {version}")
            raise SchemaError(f"cannot {what}: {cause(exc)}; {left}") from None
        if version is None:
            log.info("database created at schema version %d", LATEST)
            return
        ran += 1
        log.warning("%s", done)  # a warning: it shows once, whichever command opened it


def _stamp(db: Database, version: int) -> None:
    """Write the version, in the transaction of the change it records."""
    if db.table_exists(VERSION_TABLE):
        db.execute_sql(f'UPDATE "{VERSION_TABLE}" SET "version" = {int(version)}')
    else:
        db.execute_sql(f'CREATE TABLE "{VERSION_TABLE}" ("version" INTEGER NOT NULL)')
        db.execute_sql(f'INSERT INTO "{VERSION_TABLE}" ("version") VALUES ({int(version)})')
