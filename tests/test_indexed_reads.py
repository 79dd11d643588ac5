"""Every list and lookup endpoint, and every retention statement of the write path, is
served by an index: no full table scan, no temporary sort (EXPLAIN on both databases). The
gate's reads and the status page's per-cron reads go through the indexes the product
creates (no full scan but of the tables they read whole by design).

The statements are the ones the endpoints really run, recorded while the request is
served. On PostgreSQL sequential scans and sorts are switched off for the EXPLAIN: the
planner then still picks one only when no index can serve the query.
"""
from __future__ import annotations

import re

import pytest

from qlshadow.storage import db, retention
from qlshadow.storage.retention import deletes
from helpers import STATUS_PATH

pytestmark = pytest.mark.shadow_on

UUID_TAIL = "9d4a-4e6b-8f1a-2c3d4e5f6a7b"


@pytest.fixture
def recorded(monkeypatch):
    """A list that collects (sql, params) of every SELECT/DELETE run through Peewee."""
    statements = []
    database = db.database.obj
    original = database.execute_sql

    def record(sql, params=None, *args, **kwargs):
        if sql.lstrip().upper().startswith(("SELECT", "DELETE")):
            statements.append((sql, tuple(params or ())))
        return original(sql, params, *args, **kwargs)

    monkeypatch.setattr(database, "execute_sql", record)
    return statements


@pytest.fixture
def runs_of_two_crons(client, auth, make_cron):
    """Two crons with a few exited and running Runs and instances each."""
    crons = [make_cron(name=n)["id"] for n in ("a", "b")]
    for n in range(6):
        for cron_id in crons:
            body = {"ids": [cron_id], "status": n % 2, "pid": n, "log_path": f"{n}.log",
                    "last_execution_time": 1700000000 + n, "exit_code": 0,
                    "execution_id": f"legacy-system:{1700000000 + 60 * n}:{n:08x}-{UUID_TAIL}"}
            assert client.put(STATUS_PATH, json=body, headers=auth).status_code == 200
    return crons


def plan_lines(sql: str, params: tuple) -> list:
    """The query plan of one statement, one line per node, on the bound database."""
    database = db.database.obj
    if db.is_sqlite(database):
        rows = database.execute_sql("EXPLAIN QUERY PLAN " + sql, params).fetchall()
        return [row[-1] for row in rows]
    database.execute_sql("SET enable_seqscan = off")
    database.execute_sql("SET enable_sort = off")
    try:
        return [row[0] for row in database.execute_sql("EXPLAIN " + sql, params).fetchall()]
    finally:
        database.execute_sql("RESET enable_seqscan")
        database.execute_sql("RESET enable_sort")


# A table walked in primary-key order under a LIMIT reads only `limit` rows; SQLite prints
# that as SCAN too (the failures page, the oldest instances retention looks at, the newest
# Runs: shadow_runs is keyed by (accepted_at, id)).
_ID_WALK = re.compile(r'ORDER BY ("t\d+"\.)?"id"( DESC)? LIMIT')
PRIMARY_KEY_WALKS = {
    "shadow_failures": _ID_WALK, "crons": _ID_WALK, "running_instances": _ID_WALK,
    "shadow_runs": re.compile(r'ORDER BY ("t\d+"\.)?"accepted_at"( DESC)?, '
                              r'("t\d+"\.)?"id"( DESC)? LIMIT')}


def full_scans_and_sorts(sql: str, params: tuple) -> list:
    """The plan lines that read a whole table or sort rows outside an index."""
    bad = []
    for line in plan_lines(sql, params):
        text = line.strip()
        if db.is_sqlite():
            scan = text.startswith("SCAN ") and " USING " not in text
            table = text.split()[1] if scan else ""
            if table == "t1":  # Peewee's alias: the table it names
                table = re.search(r'FROM "(\w+)" AS "t1"', sql).group(1)
            if scan and table in PRIMARY_KEY_WALKS and PRIMARY_KEY_WALKS[table].search(sql):
                continue
            if scan or "TEMP B-TREE" in text:
                bad.append(text)
        elif (("Seq Scan" in text and "Seq Scan on hosts" not in text)
              or text.lstrip("-> ").startswith(("Sort", "Incremental Sort"))):
            bad.append(text)  # hosts: one row per host of the fleet, read whole (fleet.py)
    return bad


def served_by_indexes(client, auth, recorded, path: str) -> dict:
    """{sql: bad plan lines} for the reads that GET path runs (empty lists when all is well)."""
    del recorded[:]
    response = client.get(path, headers=auth)
    assert response.status_code == 200, response.get_json()
    reads = [(sql, params) for sql, params in recorded if "tokens" not in sql]
    assert reads, f"{path} ran no statement"
    return {sql: full_scans_and_sorts(sql, params) for sql, params in reads}


ENDPOINTS = [
    "/open/runs",
    "/open/runs?cron_id={a}",
    "/open/runs?state=running",
    "/open/runs?cron_id={a}&state=exited",
    "/open/runs?cron_id={a}&before={run}",
    "/open/runs?before={run}",
    "/open/runs/{run}",
    "/open/runs/failures",
    "/open/runs/failures?before=2",
    "/open/crons/{a}/instances",
]


@pytest.mark.parametrize("template", ENDPOINTS)
def test_each_list_and_lookup_endpoint_reads_through_an_index(client, auth, runs_of_two_crons,
                                                               recorded, template):
    a, _ = runs_of_two_crons
    run = client.get(f"/open/runs?cron_id={a}&limit=3", headers=auth).get_json()["data"][-1]["id"]
    path = template.format(a=a, run=run)

    plans = served_by_indexes(client, auth, recorded, path)

    assert {sql: bad for sql, bad in plans.items() if bad} == {}


def test_the_run_lookup_finds_the_run_it_names(client, auth, runs_of_two_crons):
    listed = client.get("/open/runs", headers=auth).get_json()["data"]

    for run in listed:
        assert client.get(f"/open/runs/{run['id']}", headers=auth).get_json()["data"] == run


def test_the_retention_steps_of_the_write_path_read_through_indexes(app, runs_of_two_crons,
                                                                     recorded):
    a, _ = runs_of_two_crons
    pruner = retention.Pruner(retention.policy_of(app.extensions["qlshadow"]))
    del recorded[:]
    with db.database.connection_context(), db.write_transaction():
        retention.expired_runs(1800000000, 16)
        retention.expired_instances(1800000000, 16)
        retention.capped_runs(a, 2, 16)
        retention.capped_instances(a, 2, 16)
        pruner._next_cron("runs", deletes._NEXT_RUN_CRON, deletes._FIRST_RUN_CRON)
        pruner._next_cron("instances", deletes._NEXT_INSTANCE_CRON, deletes._FIRST_INSTANCE_CRON)
        plans = {sql: full_scans_and_sorts(sql, params) for sql, params in recorded}

    assert len(plans) >= 8
    assert {sql: bad for sql, bad in plans.items() if bad} == {}


# --- the gate ----------------------------------------------------------------------------------
# The gate reads every cron (the report lists them all) and the capped shadow_failures and
# clock_steps whole; everything else must name an index or the table's key and bound the
# read by it.
GATE_WHOLE_READS = {"crons", "shadow_failures", "clock_steps"}
# On SQLite the index (or key) each gate read must search by, and the leading constraint.
GATE_SEARCHES = {
    "shadow_runs": re.compile(r"USING (COVERING INDEX shadow_runs_cron \(cron_id=\? AND "
                              r"accepted_at>\? AND accepted_at<\?\)|INDEX shadow_runs_cron "
                              r"\(cron_id=\? AND accepted_at>\? AND accepted_at<\?\)|"
                              r"PRIMARY KEY \(accepted_at>\? AND accepted_at<\?\)|"
                              # A cron's newest Run, its last before a missed firing, and
                              # health's reads of the stuck limit (open Runs only): seeks.
                              r"(COVERING )?INDEX shadow_runs_cron \(cron_id=\?( AND "
                              r"accepted_at<\?)?\)|PRIMARY KEY \(accepted_at=\?\))"),
    "running_instances": re.compile(r"USING INDEX running_instances_cron \(cron_id=\?\)"),
}


def gate_reads_off_index(sql: str, params: tuple) -> list:
    """The plan lines of one gate statement that read a table without its index or key."""
    bad = []
    tables = re.findall(r'FROM "(\w+)"', sql)
    for line in plan_lines(sql, params):
        text = line.strip()
        if db.is_sqlite():
            if not text.startswith(("SCAN ", "SEARCH ")):
                continue
            table = text.split()[1]
            if table == "t1":  # Peewee's alias: the table it names
                table = re.search(r'FROM "(\w+)" AS "t1"', sql).group(1)
            if table in GATE_WHOLE_READS:
                continue
            wanted = GATE_SEARCHES.get(table)
            if wanted is None or not text.startswith("SEARCH ") or not wanted.search(text):
                bad.append(text)
        elif "Seq Scan" in text and not any(f"Seq Scan on {t}" in text for t in GATE_WHOLE_READS):
            bad.append(text)
    assert tables, sql
    return bad


@pytest.fixture
def gate_history(app, runs_of_two_crons):
    """The two crons' Runs and instances, a manual run (an instance without a Run) and a
    firing with neither, so that every read of the gate runs."""
    from qlshadow.storage.models import Cron, RunningInstance
    a, _ = runs_of_two_crons
    with db.database.connection_context(), db.write_transaction():
        # made long before the window, so that the gate judges its firings
        Cron.update(created_at=0, updated_at=0).execute()
        RunningInstance.insert(cron=a, pid=7, log_path="m.log", started_at=1700000100).execute()
    return runs_of_two_crons


@pytest.mark.parametrize("one_cron", [False, True], ids=["every cron", "one cron"])
def test_every_read_of_the_gate_goes_through_an_index_the_product_creates(gate_history, recorded,
                                                                          one_cron):
    from qlshadow.watch import reconcile
    a, _ = gate_history
    del recorded[:]
    with db.database.connection_context():
        report = reconcile.reconcile(1700000000 - 86400, 1700000000 + 2 * 86400,
                                     cron_id=a if one_cron else None,
                                     now=1700000000 + 2 * 86400)
        # The Runs of a doubled firing are read only when there is one: run it here.
        from qlshadow.watch.firing_times import _sql
        from qlshadow.watch.reconcile.reads import _RUN_IDS
        db.database.obj.execute_sql(_sql(_RUN_IDS),
                                    (a, 1700000000, 1700000060)).fetchall()
        plans = {sql: gate_reads_off_index(sql, params) for sql, params in recorded}

    # every kind of read ran: Runs by window, per minute and by id, instance starts
    assert report["crons"] and any(c["unmatched_instances"] for c in report["crons"])
    read = " ".join(plans)
    for fragment in ('FROM "running_instances"',
                     'ORDER BY "accepted_at", "id"', 'GROUP BY "accepted_at" / 60'):
        assert fragment in read
    assert {sql: bad for sql, bad in plans.items() if bad} == {}


def whole_table_reads(sql: str, params: tuple, whole_ok: set) -> list:
    """The plan lines that read a whole table other than those in whole_ok."""
    bad = []
    for line in plan_lines(sql, params):
        text = line.strip()
        if db.is_sqlite():
            if text.startswith("SCAN ") and " USING " not in text:
                table = text.split()[1]
                if table == "t1":  # Peewee's alias: the table it names
                    table = re.search(r'FROM "(\w+)" AS "t1"', sql).group(1)
                if re.search(rf'\) AS "{re.escape(table)}"', sql):
                    continue  # a UNION ALL branch (health's reads): a co-routine, no table
                if table not in whole_ok:
                    bad.append(text)
        elif "Seq Scan" in text and not any(f"Seq Scan on {t}" in text for t in whole_ok):
            bad.append(text)
    return bad


@pytest.mark.parametrize("template", ["/page/", "/page/crons/{a}"])
def test_the_status_pages_per_cron_listings_read_through_an_index(client, auth, token,
                                                                  runs_of_two_crons, recorded,
                                                                  template):
    # The list of crons is the page itself (counted and read whole), and shadow_failures and
    # clock_steps are capped; every Run and instance it shows per cron is read through an index.
    a, _ = runs_of_two_crons
    assert client.post("/page/login", data={"token": token}).status_code in (302, 303)
    del recorded[:]
    assert client.get(template.format(a=a)).status_code == 200
    reads = [(sql, params) for sql, params in recorded if "tokens" not in sql]
    assert any("running_instances" in sql for sql, _ in reads)

    plans = {sql: whole_table_reads(sql, params, {"crons", "shadow_failures", "clock_steps",
                                                  "hosts"})
             for sql, params in reads}

    assert {sql: bad for sql, bad in plans.items() if bad} == {}


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_fleets_reads_of_an_open_runs_own_host_go_through_an_index(client, auth, gate_history,
                                                                     recorded):
    # With several hosts, whether a later Run of the same host started is read per open Run
    # (GET /open/runs, the gate): a bounded walk of shadow_runs_cron, never the history.
    from qlshadow.core import fleet
    from qlshadow.watch import reconcile
    a, _ = gate_history
    with db.database.connection_context(), db.write_transaction():
        fleet.record_host("nas", 1700000000)
    plans = served_by_indexes(client, auth, recorded, f"/open/runs?cron_id={a}&state=running")
    assert any('"host_id" = ' in sql for sql in plans)
    assert {sql: bad for sql, bad in plans.items() if bad} == {}
    del recorded[:]
    with db.database.connection_context():
        reconcile.reconcile(1700000000 - 86400, 1700000000 + 2 * 86400, cron_id=a,
                            now=1700000000 + 2 * 86400)
        plans = {sql: gate_reads_off_index(sql, params) for sql, params in recorded}
    assert any('"accepted_at", "host_id" FROM "shadow_runs"' in sql for sql in plans)
    assert any('"host_id" = ' in sql for sql in plans)
    assert {sql: bad for sql, bad in plans.items() if bad} == {}
