"""The Settings fields benches vary instead of patching the product (no environment
variable sets them): sqlite_pragmas, count_metrics, shadow_savepoint."""
from __future__ import annotations

import dataclasses

import pytest
from helpers import ONE_BACKEND, SHADOW_ON, STATUS_PATH, legacy_rows, play
from test_shadow_fail_open import CRON, callback, install_failing_trigger

from qlshadow.storage import db
from qlshadow.core.auth import system_token
from qlshadow.core.runtime import KEY
from qlshadow.web.views import create_app


@pytest.fixture
def app_with(make_settings):
    """app_with(**fields) -> (app, headers): an app on Shadow-on settings with fields changed."""
    def build(**fields):
        application = create_app(dataclasses.replace(make_settings(**SHADOW_ON), **fields))
        with db.database.connection_context(), db.write_transaction():
            value = system_token(application.extensions["qlshadow"].token_file)["value"]
        return application, {"Authorization": f"Bearer {value}"}
    yield build
    db.discard_connection()


def pragma(name: str):
    with db.database.connection_context():
        return db.database.execute_sql(f"PRAGMA {name}").fetchone()[0]


@ONE_BACKEND
def test_sqlite_pragmas_replace_the_shipped_ones_and_size_a_new_file(app_with):
    app_with(sqlite_pragmas=(("cache_size", -256), ("wal_autocheckpoint", 100), ("page_size", 2048)))
    assert (pragma("cache_size"), pragma("wal_autocheckpoint"), pragma("page_size")) == (-256, 100, 2048)


@ONE_BACKEND
def test_without_sqlite_pragmas_the_shipped_ones_hold(app_with):
    app_with()
    assert pragma("cache_size") == -512
    assert pragma("page_size") == 1024
    assert pragma("wal_autocheckpoint") == db.WAL_CHECKPOINT_BYTES // 1024


@pytest.mark.parametrize("count", [True, False])
def test_count_metrics_false_counts_no_callback(app_with, count):
    application, headers = app_with(count_metrics=count)
    play(application.test_client(), headers, [CRON, callback(0), callback(1)])
    snapshot = application.extensions[KEY].counters.snapshot()
    assert snapshot["callbacks"]["ok"] == (2 if count else 0)
    assert sum(snapshot["shadow"].values()) == (2 if count else 0)


# SQLite's RAISE(ABORT) undoes only the failing statement; on PostgreSQL an error outside
# a savepoint aborts the whole transaction (its COMMIT rolls back), which is what the
# savepoint is there for: without it the Legacy write of the callback is lost.
@pytest.mark.parametrize("backend", ["postgres"])
@pytest.mark.parametrize("savepoint", [True, False])
def test_shadow_savepoint_false_lets_a_failed_shadow_write_cost_the_legacy_write(app_with, savepoint):
    application, headers = app_with(shadow_savepoint=savepoint)
    client = application.test_client()
    play(client, headers, [CRON])
    install_failing_trigger("INSERT", "injected shadow failure")
    response = client.put(STATUS_PATH, json=callback(0)[2], headers=headers)
    assert response.status_code == 200
    assert (legacy_rows()["crons"][0]["status"] == 0) is savepoint  # running, or still idle
