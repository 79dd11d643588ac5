"""`qlshadow import qinglong PATH`: QingLong 2.x crons come over with their ids.

QingLong keeps its crons in db/database.sqlite (Sequelize's `Crontabs` table) or, before
2.11, in db/crontab.db (NeDB: one JSON document per line; a later line with the same _id
replaces an earlier one, a `$$deleted` line removes it). Only the standard library reads
them, read-only.

Ids are kept, because 2.x clients name crons by id. An id is what QingLong's table says;
a NeDB document's string _id is kept when it is a plain decimal number and otherwise gets a
new id here, in file order (as QingLong's own move to SQLite gave them). Such a cron is
found again by its name, command and schedule, QingLong's unique key, so a second import
matches it instead of adding it twice.

Each QingLong cron is imported, kept (the cron with its id here is the same cron: every
field we carry is equal) or refused with a reason (its id is another cron's here, its
command uses a `task` form we do not run, a field we cannot take). A refused cron writes
nothing; the others are imported in one transaction with one crontab install
(cron_change.change). Created and updated times are the import's: a cron dated by QingLong's
createdAt would be judged missed for every firing since then. Run state (status, pid,
last run times) stays QingLong's, and labels, isPinned and sub_id have no field here.
"""
from __future__ import annotations

import json
import os
import time

from qlshadow.core import fleet
from qlshadow.errors import InvalidInput

# QingLong hands out Sequelize ids from 1; PostgreSQL's crons.id is a 32-bit serial.
ID_MAX = 2**31 - 1
SQLITE_NAMES = ("db/database.sqlite", "database.sqlite", "data/db/database.sqlite")
NEDB_NAMES = ("db/crontab.db", "crontab.db", "data/db/crontab.db")
IMPORTED, KEPT, REFUSED = "imported", "kept", "refused"


# --- reading QingLong's files ---------------------------------------------------------------

def find_source(path: str) -> tuple:
    """(kind, file) for a QingLong data dir or one of its database files."""
    if os.path.isdir(path):
        for kind, names in (("sqlite", SQLITE_NAMES), ("nedb", NEDB_NAMES)):
            for name in names:
                candidate = os.path.join(path, name)
                if os.path.isfile(candidate):
                    return kind, candidate
        raise InvalidInput(f"{path} holds no QingLong database (looked for db/database.sqlite "
                           "and db/crontab.db): give the QingLong data dir or the file itself.")
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}.") from None
    return ("sqlite" if head == b"SQLite format 3\x00" else "nedb"), path


def read_sqlite(path: str) -> list:
    """The Crontabs rows of a QingLong database.sqlite, as dicts, by id."""
    import sqlite3
    from urllib.parse import quote
    try:
        conn = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise InvalidInput(f"cannot open {path}: {exc}.") from None
    try:
        conn.row_factory = sqlite3.Row
        return [dict(row) for row in conn.execute('SELECT * FROM "Crontabs" ORDER BY id')]
    except sqlite3.Error as exc:
        raise InvalidInput(f"{path} has no readable QingLong Crontabs table ({exc}).") from None
    finally:
        conn.close()


def read_nedb(path: str) -> list:
    """The live documents of a NeDB file, each where its latest version is written; a line
    that is no document becomes a row that is refused."""
    docs: dict = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}.") from None
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or not isinstance(doc.get("_id"), str):
            if isinstance(doc, dict) and "$$indexCreated" in doc:
                continue  # an index definition, not a document
            docs[f"line {number}"] = {"_bad": f"line {number} is not a NeDB document"}
            continue
        if doc.get("$$deleted") is True:
            docs.pop(doc["_id"], None)
        else:
            docs.pop(doc["_id"], None)  # the latest version, where it is written
            docs[doc["_id"]] = doc
    return list(docs.values())


def _json_field(value):
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _source_id(raw: dict):
    """(label shown, integer id or None) of a QingLong cron."""
    if "_bad" in raw:
        return raw["_bad"].split(" is ")[0], None
    value = raw.get("id")
    if value is None and isinstance(raw.get("_id"), str):
        text = raw["_id"]
        label = repr(text)
        if text.isascii() and text.isdigit() and not text.startswith("0"):
            return label, int(text)
        return label, None
    if type(value) is int or (isinstance(value, float) and value.is_integer()):
        return str(int(value)), int(value)
    return repr(value), None


def normalize(raw: dict) -> dict:
    """The request body our validation takes, from one QingLong cron (either format)."""
    extra = _json_field(raw.get("extra_schedules"))
    body = {"name": raw.get("name") or raw.get("command"), "command": raw.get("command"),
            "schedule": raw.get("schedule"), "extra_schedules": extra or None,
            "task_before": raw.get("task_before") or None,
            "task_after": raw.get("task_after") or None,
            "log_name": raw.get("log_name") or None,
            "allow_multiple_instances": 1 if raw.get("allow_multiple_instances") else 0}
    if isinstance(body["command"], str):
        body["command"] = body["command"].strip()  # as QingLong stores it
    return body


def load(path: str) -> tuple:
    """(file read, [(label, id or None, raw cron)]) from a QingLong data dir or file."""
    kind, file = find_source(path)
    rows = read_sqlite(file) if kind == "sqlite" else read_nedb(file)
    return file, [(*_source_id(raw), raw) for raw in rows]


# --- planning and writing -------------------------------------------------------------------

COMPARED = ("name", "command", "schedule", "extra_schedules", "task_before", "task_after",
            "work_dir", "log_name", "allow_multiple_instances", "is_disabled")


def _disabled(raw: dict) -> int:
    # Older QingLong marked a disabled cron by status 2 only; later ones by isDisabled.
    return 1 if raw.get("isDisabled") or raw.get("status") == 2 else 0


def _check(settings, raw: dict) -> dict:
    """Column values for a QingLong cron, or InvalidInput saying why it cannot come."""
    from qlshadow.service import crons
    if "_bad" in raw:
        raise InvalidInput(raw["_bad"] + ".")
    body = normalize(raw)
    words = body["command"].split() if isinstance(body["command"], str) else []
    if words and words[0] == "ql":
        raise InvalidInput("QingLong's own `ql` command (repo, update, rmlog...) does not "
                           "exist here.")
    values = crons.validate(body, partial=False)
    from qlshadow.host.crontab import CronTooLong, check_cron
    try:
        check_cron(settings, values)
    except CronTooLong as exc:
        raise InvalidInput(str(exc)) from None
    values.setdefault("work_dir", None)
    values["is_disabled"] = _disabled(raw)
    return values


def _differences(row: dict, values: dict) -> list:
    return [key for key in COMPARED if row.get(key) != values.get(key)]


def plan(settings, source: list, existing: bool = True) -> list:
    """One entry per QingLong cron: outcome, our id, name, reason and (to import) values.

    existing=False plans against an empty database (a dry run before the first start).
    """
    from qlshadow.storage.models import Cron, ShadowRun
    rows = {}
    if existing:
        rows = {row["id"]: row for row in Cron.select().dicts()}
    by_key = {(r["name"], r["command"], r["schedule"]): r for r in rows.values()}
    wanted = [cron_id for _, cron_id, _ in source if cron_id is not None and cron_id not in rows]
    with_runs = set()
    if existing and wanted:
        query = ShadowRun.select(ShadowRun.cron_id).where(ShadowRun.cron_id.in_(wanted)).distinct()
        with_runs = {r[0] for r in query.tuples()}
    entries, claimed = [], set()
    for label, cron_id, raw in source:
        entry = {"source": label, "id": cron_id, "name": raw.get("name") or raw.get("command")}
        entries.append(entry)
        try:
            values = _check(settings, raw)
        except InvalidInput as exc:
            entry.update(outcome=REFUSED, reason=str(exc))
            continue
        if cron_id is not None and not 1 <= cron_id <= ID_MAX:
            entry.update(outcome=REFUSED, reason=f"id {cron_id} is outside 1..{ID_MAX}.")
            continue
        here = rows.get(cron_id) if cron_id is not None else \
            by_key.get((values["name"], values["command"], values["schedule"]))
        if cron_id is not None and cron_id in claimed:
            entry.update(outcome=REFUSED, reason=f"id {cron_id} appears twice in the file.")
        elif here is not None:
            entry["id"] = here["id"]
            differ = _differences(here, values)
            if differ:
                entry.update(outcome=REFUSED, reason=(
                    f"id {here['id']} is already the cron {here['name']!r} here, which "
                    f"differs in {', '.join(differ)}; nothing was written for it."))
            else:
                entry.update(outcome=KEPT, reason="the same cron is here already.")
        elif cron_id in with_runs:
            entry.update(outcome=REFUSED, reason=(
                f"id {cron_id} belonged to a deleted cron whose Runs are kept here; ids are "
                "never given to a second cron."))
        else:
            entry.update(outcome=IMPORTED, values=values,
                         reason=None if cron_id is not None else "new id: the NeDB _id is "
                         "not a number.")
        if entry["id"] is not None:
            claimed.add(entry["id"])
    return entries


def pending(entries: list) -> bool:
    """True when a plan imports anything."""
    return any(e["outcome"] == IMPORTED for e in entries)


def _advance_sequence() -> None:
    """PostgreSQL: move crons' id sequence past the ids given here, so that the next
    cron created does not take one (SQLite's AUTOINCREMENT follows by itself)."""
    from qlshadow.storage.db import is_sqlite
    from qlshadow.storage.models import database
    if is_sqlite(database.obj):
        return
    sequence = database.execute_sql("SELECT pg_get_serial_sequence('crons', 'id')").fetchone()[0]
    # setval, never lowering it: ids of deleted crons stay unused.
    database.execute_sql(f"SELECT setval(%s, GREATEST(MAX(id), (SELECT last_value FROM "
                         f"{sequence}))) FROM crons", (sequence,))


def apply(settings, source: list, planned) -> list:
    """Write the plan's imports (inside cron_change.change's transaction); returns the plan.

    planned is the dry pass's plan: a cron that had no id takes the id it got there, which
    the installed crontab names.
    """
    from peewee import IntegrityError

    from qlshadow.storage.models import Cron, database
    entries = plan(settings, source)
    given = {e["source"]: e["id"] for e in planned or () if e["outcome"] == IMPORTED}
    # Brought in on this host, a cron runs here only, as one created here does.
    hosts = fleet.check_hosts([settings.host_name])
    now = int(time.time())
    later = []
    for entry in entries:
        if entry["outcome"] != IMPORTED:
            continue
        if entry["id"] is None:
            entry["id"] = given.get(entry["source"])
            if entry["id"] is None:
                later.append(entry)
                continue
        _insert(entry, now, hosts, Cron, database, IntegrityError)
    _advance_sequence()
    for entry in later:
        _insert(entry, now, hosts, Cron, database, IntegrityError)
    return entries


def _insert(entry: dict, now: int, hosts: str, Cron, database, IntegrityError) -> None:
    values = dict(entry.pop("values"), created_at=now, updated_at=now, hosts=hosts)
    if entry["id"] is not None:
        values["id"] = entry["id"]
    try:
        with database.atomic():  # a savepoint: one cron's conflict leaves the others
            entry["id"] = Cron.insert(**values).execute()
    except IntegrityError:
        entry.update(outcome=REFUSED, reason=f"id {entry['id']} was taken while importing.")
