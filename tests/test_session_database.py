"""The suite's shared PostgreSQL database (tests/conftest.py): each test gets it empty.

Only PostgreSQL is shared across tests; SQLite gets a new file per test.
"""
from __future__ import annotations

import psycopg2
import pytest

from helpers import _pg_admin, drop_pg_database

pytestmark = pytest.mark.parametrize("backend", ["postgres"])


def _name(db_url: str) -> str:
    return db_url.rsplit("/", 1)[1]


def _public_objects(name: str) -> list:
    conn = _pg_admin(name)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = 'public' UNION ALL SELECT p.proname FROM pg_proc p "
                        "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'")
            return [row[0] for row in cur.fetchall()]
    finally:
        conn.close()


def _first_serial_id(name: str) -> int:
    conn = _pg_admin(name)
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id serial PRIMARY KEY, v text)")
            cur.execute("INSERT INTO t (v) VALUES ('a'), ('b') RETURNING id")
            return cur.fetchall()[0][0]
    finally:
        conn.close()


def test_emptying_leaves_no_table_function_or_sequence_and_ids_start_at_1(pg_databases, db_url):
    name = _name(db_url)
    assert _first_serial_id(name) == 1
    with _pg_admin(name).cursor() as cur:
        cur.execute("CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'")

    assert pg_databases.fresh() == db_url

    assert _public_objects(name) == []
    assert _first_serial_id(name) == 1


def test_emptying_ends_connections_a_test_left_open(pg_databases, db_url):
    left_open = _pg_admin(_name(db_url))

    pg_databases.fresh()

    with pytest.raises(psycopg2.OperationalError):
        with left_open.cursor() as cur:
            cur.execute("SELECT 1")


def test_a_session_database_a_test_dropped_is_made_again(pg_databases, db_url):
    drop_pg_database(_name(db_url))

    assert pg_databases.fresh() == db_url

    assert _public_objects(_name(db_url)) == []
