"""Whole-database invariants, checked after every fault scenario on SQLite and PostgreSQL.

The check opens its own plain DB-API connection (sqlite3 or psycopg2), so it reads what
another process committed, works while a crashed server's files are still on disk, and
never touches the models' database binding of the test process.

    inspector = Inspector(db_url)
    summary = inspector.check(runs_exactly=sent_ids, crons={1: {"status": 1}})

Every problem found is collected and raised as one AssertionError listing them all.
"""
from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit

from qlshadow.config import sqlite_file
from qlshadow.core.shadow.ids import PROJECT_ID, attempt_id, parse_execution_id, run_id
from qlshadow.core.shadow.reader import logical_row

TABLES = ("crons", "running_instances", "apps", "tokens", "shadow_runs", "shadow_failures")
STATES = ("accepted", "spawned", "running", "exited")
RANK = {state: rank for rank, state in enumerate(STATES)}
FAILURE_REASONS = frozenset({"invalid_execution_id", "multiple_ids", "unknown_cron",
                             "unsupported_status", "replay_drift", "writer_error"})
_HEX64 = re.compile(r"[0-9a-f]{64}")


def connect(db_url: str):
    """A plain DB-API connection to the database a QL_DB_URL names (autocommit reads)."""
    path = sqlite_file(db_url)
    if path is not None:
        import sqlite3
        conn = sqlite3.connect(path, timeout=10, isolation_level=None)
        return conn
    import psycopg2
    parts = urlsplit(db_url)
    kwargs = {"dbname": unquote(parts.path.lstrip("/")) or "postgres",
              "host": parts.hostname or "127.0.0.1", "port": parts.port or 5432,
              "user": unquote(parts.username or "postgres"), "connect_timeout": 5}
    if parts.password:
        kwargs["password"] = unquote(parts.password)
    kwargs.update(dict(parse_qsl(parts.query)))
    conn = psycopg2.connect(**kwargs)
    conn.autocommit = True
    return conn


class Inspector:
    """Reads whole tables of one database and checks the invariants over them."""

    def __init__(self, db_url: str):
        self.db_url = db_url
        self.sqlite = sqlite_file(db_url) is not None
        self.conn = connect(db_url)

    def close(self) -> None:
        """Close the inspector's own connection."""
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def rows(self, table: str) -> list:
        """Every row of a table as dicts, in primary-key order."""
        order = "accepted_at, id" if table == "shadow_runs" else (
            "token_hash" if table == "tokens" else "id")
        cur = self.conn.cursor()
        cur.execute(f"SELECT * FROM {table} ORDER BY {order}")
        names = [d[0] for d in cur.description]
        result = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        cur.close()
        if table == "shadow_runs" and "request_uuid" in names:  # the full Run of a slim row
            result = [logical_row(row) for row in result]
        return result

    def snapshot(self) -> dict:
        """All rows of all tables: equal snapshots mean nothing was written in between."""
        return {table: self.rows(table) for table in TABLES}

    def integrity(self) -> str:
        """SQLite's integrity_check result ("ok"); "ok" on PostgreSQL, which has none."""
        if not self.sqlite:
            return "ok"
        cur = self.conn.cursor()
        cur.execute("PRAGMA integrity_check")
        result = "; ".join(str(row[0]) for row in cur.fetchall())
        cur.close()
        return result

    def check(self, *, runs_exactly=None, runs_within=None, runs_include=None, crons=None,
              open_instances: bool | None = None, failure_cap: int = 1000) -> dict:
        """Check every invariant; raise AssertionError listing each problem found.

        runs_exactly: the execution ids that must each have exactly one Run, and no others.
        runs_within: every Run's execution id must be in this set (ids that were sent).
        runs_include: these execution ids must have a Run (callbacks answered 200).
        crons: {cron_id: {column: expected value}} for Legacy columns (status, pid, ...).
        open_instances: False demands that no RunningInstance is still running.
        Returns a small summary of counts for the report.
        """
        problems: list = []
        data = self.snapshot()
        problems += _check_runs(data["shadow_runs"])
        problems += _check_legacy(data["crons"], data["running_instances"], crons, open_instances)
        problems += _check_secrets(data["apps"], data["tokens"])
        problems += _check_failures(data["shadow_failures"], failure_cap)
        integrity = self.integrity()
        if integrity != "ok":
            problems.append(f"integrity_check: {integrity}")

        keys = [r["idempotency_key"] for r in data["shadow_runs"]]
        stored = set(keys)
        if runs_exactly is not None:
            wanted = set(runs_exactly)
            missing, extra = wanted - stored, stored - wanted
            if missing:
                problems.append(f"{len(missing)} executions have no Run, e.g. {sorted(missing)[:3]}")
            if extra:
                problems.append(f"{len(extra)} Runs for executions never sent, e.g. {sorted(extra)[:3]}")
            if len(keys) != len(wanted):
                problems.append(f"{len(keys)} Runs for {len(wanted)} executions")
        if runs_within is not None:
            extra = stored - set(runs_within)
            if extra:
                problems.append(f"{len(extra)} Runs for executions never sent, e.g. {sorted(extra)[:3]}")
        if runs_include is not None:
            missing = set(runs_include) - stored
            if missing:
                problems.append(f"{len(missing)} answered executions have no Run, e.g. {sorted(missing)[:3]}")
        if problems:
            raise AssertionError("database invariants broken:\n  " + "\n  ".join(problems))
        states: dict = {}
        for row in data["shadow_runs"]:
            states[row["state"]] = states.get(row["state"], 0) + 1
        return {"runs": len(keys), "runs_by_state": states, "crons": len(data["crons"]),
                "instances": len(data["running_instances"]),
                "failures": len(data["shadow_failures"]), "integrity": integrity}


def _check_runs(runs: list) -> list:
    problems = []
    run_ids, attempt_ids = set(), set()
    for row in runs:
        key = row["idempotency_key"]
        where = f"Run {key!r}"
        seconds = parse_execution_id(key)
        if seconds is None:
            problems.append(f"{where}: key is not a valid execution id")
            continue
        expected = {"project_id": PROJECT_ID, "request_id": key, "accepted_at": seconds,
                    "id": run_id(key, seconds), "attempt_id": attempt_id(key, seconds),
                    "task_identity": f"legacy-cron:{row['cron_id']}",
                    "origin": "scheduled_system", "trigger_type": "scheduled_system",
                    "triggered_by": "legacy:system-crond", "execution_owner": "legacy"}
        for column, value in expected.items():
            if row[column] != value:
                problems.append(f"{where}: {column}={row[column]!r}, expected {value!r}")
        # Exactly one Attempt per Run: the Attempt lives in the Run's row, so "one" means
        # its id is the deterministic one and no other Run carries the same Attempt.
        if row["id"] in run_ids:
            problems.append(f"{where}: run id {row['id']} used twice")
        if row["attempt_id"] in attempt_ids:
            problems.append(f"{where}: attempt id {row['attempt_id']} used twice")
        run_ids.add(row["id"])
        attempt_ids.add(row["attempt_id"])
        problems += [f"{where}: {p}" for p in _check_events(row)]
    return problems


def _check_events(row: dict) -> list:
    problems = []
    events = []
    for item in (row["events"] or "").split():
        kind, sep, at = item.partition("@")
        if not sep or not at.lstrip("-").isdigit() or kind not in RANK:
            return [f"malformed event {item!r}"]
        events.append(kind)
    if not events:
        return ["no events"]
    if len(set(events)) != len(events):
        problems.append(f"an event kind repeats: {events}")
    ranks = [RANK[k] for k in events]
    if ranks != sorted(set(ranks)):
        problems.append(f"events out of order: {events}")
    if events[:2] != ["accepted", "spawned"]:
        problems.append(f"events do not start with accepted, spawned: {events}")
    if row["state"] != events[-1]:
        problems.append(f"state {row['state']!r} is not the furthest event {events[-1]!r}")
    if (row["state"] == "exited") != (row["finished_at"] is not None):
        problems.append(f"state {row['state']!r} with finished_at={row['finished_at']!r}")
    if row["state"] != "exited" and row["exit_code"] is not None:
        problems.append(f"exit_code {row['exit_code']!r} on a Run that has not exited")
    return problems


def _check_legacy(crons: list, instances: list, expected: dict | None,
                  open_instances: bool | None) -> list:
    problems = []
    by_id = {c["id"]: c for c in crons}
    for cron in crons:
        if cron["status"] not in (0, 1, 2, 3):
            problems.append(f"cron {cron['id']}: status {cron['status']!r}")
    for inst in instances:
        where = f"running_instance {inst['id']}"
        if inst["cron_id"] not in by_id:
            problems.append(f"{where}: its cron {inst['cron_id']} is missing")
        if inst["status"] not in (0, 1, 2, 3):
            problems.append(f"{where}: status {inst['status']!r}")
        if (inst["status"] == 0) != (inst["finished_at"] is None):
            problems.append(f"{where}: status {inst['status']} with finished_at={inst['finished_at']!r}")
        if inst["status"] == 3 and not inst["exit_code"]:
            problems.append(f"{where}: status error with exit_code {inst['exit_code']!r}")
        if inst["status"] == 1 and inst["exit_code"]:
            problems.append(f"{where}: status finished with exit_code {inst['exit_code']!r}")
        if open_instances is False and inst["status"] == 0:
            problems.append(f"{where}: still running (cron {inst['cron_id']}, pid {inst['pid']})")
    for cron_id, columns in (expected or {}).items():
        cron = by_id.get(cron_id)
        if cron is None:
            problems.append(f"cron {cron_id}: missing")
            continue
        for column, value in columns.items():
            if cron[column] != value:
                problems.append(f"cron {cron_id}: {column}={cron[column]!r}, expected {value!r}")
    return problems


def _check_secrets(apps: list, tokens: list) -> list:
    """Only SHA-256 digests are stored: a leaked database must let no one in."""
    problems = []
    for app_row in apps:
        if not _HEX64.fullmatch(app_row["client_secret_hash"] or ""):
            problems.append(f"app {app_row['name']!r}: client secret is not stored as a digest")
    for token_row in tokens:
        if not _HEX64.fullmatch(token_row["token_hash"] or ""):
            problems.append("a token is not stored as a digest")
    return problems


def _check_failures(failures: list, cap: int) -> list:
    problems = []
    if len(failures) > cap:
        problems.append(f"{len(failures)} accept failures kept, cap is {cap}")
    for row in failures:
        if row["reason"] not in FAILURE_REASONS:
            problems.append(f"accept failure {row['id']}: unknown reason {row['reason']!r}")
        if len(row["detail"] or "") > 500:
            problems.append(f"accept failure {row['id']}: detail longer than 500 characters")
    return problems
