"""GET /metrics: the Prometheus text format behind a `metrics` bearer token."""
from __future__ import annotations

import json
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from qlshadow import db, metrics
from qlshadow.auth import create_app_record, issue_token
from qlshadow.models import App, database
from conftest import SHADOW_ON, STATUS_PATH, cli_env, run_cli

EID = "legacy-system:{s}:{n:08x}-9d4a-4e6b-8f1a-2c3d4e5f6a7b"


@pytest.fixture
def shadow_env() -> dict:
    return SHADOW_ON


@pytest.fixture
def scrape(app, client):
    """scrape() -> {(sample name, frozenset of labels): value} from GET /metrics."""
    with db.database.connection_context(), db.write_transaction():
        create_app_record("prometheus", ["metrics"])
        value, _ = issue_token(App.get(App.name == "prometheus").id, int(time.time()))

    def fetch() -> dict:
        response = client.get("/metrics", headers={"Authorization": f"Bearer {value}"})
        assert response.status_code == 200, response.data
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        samples = {}
        for family in text_string_to_metric_families(response.get_data(as_text=True)):
            for sample in family.samples:
                samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
        return samples
    return fetch


def one(samples: dict, sample: str, **labels) -> float:
    return samples[(sample, frozenset({k: str(v) for k, v in labels.items()}.items()))]


def send(client, auth, body) -> int:
    return client.put(STATUS_PATH, json=body, headers=auth).status_code


def test_metrics_without_a_token_is_a_401(client):
    response = client.get("/metrics")
    assert response.status_code == 401 and response.get_json()["code"] == 401


def test_metrics_refuses_a_token_without_the_metrics_scope(client, auth):
    response = client.get("/metrics", headers=auth)
    assert response.status_code == 403
    assert "'metrics' scope" in response.get_json()["message"]


def test_app_create_accepts_the_metrics_scope(app):
    result = run_cli(cli_env(app.extensions["qlshadow"]), "app", "create", "prom",
                     "--scopes", "metrics")
    assert json.loads(result.stdout)["scopes"] == ["metrics"]


def test_every_family_parses_and_has_help_and_type(scrape):
    samples = scrape()
    names = {name for name, _ in samples}
    assert {"qlshadow_callbacks_total", "qlshadow_shadow_outcomes_total",
            "qlshadow_write_errors_total", "qlshadow_database_bytes", "qlshadow_runs",
            "process_resident_memory_bytes", "qlshadow_build_info"} <= names
    assert one(samples, "qlshadow_database_up") == 1
    assert one(samples, "process_resident_memory_bytes") > 1024 * 1024


def test_callbacks_are_counted_by_result(client, auth, make_cron, scrape):
    cron = make_cron()["id"]
    before = scrape()
    assert send(client, auth, {"ids": [cron], "status": 0, "pid": 1}) == 200
    assert send(client, auth, {"ids": [cron], "status": 0, "pid": 2}) == 200
    assert send(client, auth, {"ids": "x", "status": 0}) == 400
    assert send(client, {}, {"ids": [cron], "status": 1}) == 401
    after = scrape()
    for result, added in (("ok", 2), ("invalid", 1), ("unauthorized", 1), ("error", 0)):
        assert (one(after, "qlshadow_callbacks_total", result=result)
                - one(before, "qlshadow_callbacks_total", result=result)) == added, result


def test_shadow_outcomes_are_counted_after_commit(client, auth, make_cron, scrape):
    cron = make_cron()["id"]
    eid = EID.format(s=1700000000, n=1)
    before = scrape()
    running = {"ids": [cron], "status": 0, "pid": 1, "execution_id": eid}
    finished = {"ids": [cron], "status": 1, "pid": 1, "exit_code": 0, "execution_id": eid}
    for body in (running, running, finished, {**running, "ids": [999]},
                 {**running, "execution_id": "nope"}):
        assert send(client, auth, body) == 200
    after = scrape()
    for outcome, added in (("created", 1), ("replayed", 1), ("advanced", 1), ("unknown_cron", 1),
                           ("invalid_execution_id", 1), ("replay_drift", 0)):
        assert (one(after, "qlshadow_shadow_outcomes_total", outcome=outcome)
                - one(before, "qlshadow_shadow_outcomes_total", outcome=outcome)) == added, outcome


def test_runs_are_counted_by_state(client, auth, make_cron, scrape):
    cron = make_cron()["id"]
    for n, status in enumerate((0, 0, 1)):
        body = {"ids": [cron], "status": status, "pid": n, "execution_id": EID.format(s=1700000000 + n, n=n)}
        assert send(client, auth, body) == 200
    samples = scrape()
    assert one(samples, "qlshadow_runs", state="running") == 2
    assert one(samples, "qlshadow_runs", state="exited") == 1
    assert one(samples, "qlshadow_runs", state="accepted") == 0


def test_each_cron_has_its_last_exit_code_and_finish_time(client, auth, make_cron, scrape):
    a = make_cron(name='quote " back \\ slash')["id"]
    b = make_cron(name="b")["id"]
    started = int(time.time())
    for cron, codes in ((a, (0, 4)), (b, (0,))):
        for n, code in enumerate(codes):
            assert send(client, auth, {"ids": [cron], "status": 0, "pid": 10 + n}) == 200
            assert send(client, auth, {"ids": [cron], "status": 1, "pid": 10 + n,
                                       "exit_code": code}) == 200
    samples = scrape()
    name = 'quote " back \\ slash'
    assert one(samples, "qlshadow_cron_last_exit_code", cron_id=a, name=name) == 4
    assert one(samples, "qlshadow_cron_last_exit_code", cron_id=b, name="b") == 0
    assert one(samples, "qlshadow_cron_last_finish_timestamp_seconds",
               cron_id=a, name=name) >= started


def test_a_cron_that_never_finished_has_no_last_exit_series(client, auth, make_cron, scrape):
    cron = make_cron()["id"]
    assert send(client, auth, {"ids": [cron], "status": 0, "pid": 1}) == 200
    samples = scrape()
    assert not [k for k in samples if k[0] == "qlshadow_cron_last_exit_code"]


def test_database_size_is_reported_and_wal_only_on_sqlite(backend, scrape):
    samples = scrape()
    assert one(samples, "qlshadow_database_bytes") > 0
    has_wal = ("qlshadow_database_wal_bytes", frozenset()) in samples
    assert has_wal == (backend == "sqlite")


def test_a_failed_write_is_counted_as_a_write_error(client, auth, make_cron, scrape, backend):
    cron = make_cron()["id"]
    before = one(scrape(), "qlshadow_write_errors_total")
    with database.connection_context():
        database.execute_sql('DROP TABLE "running_instances"')
    assert send(client, auth, {"ids": [cron], "status": 0, "pid": 1}) == 503
    samples = scrape()  # still answers from the process while the database fails it
    assert one(samples, "qlshadow_write_errors_total") - before == 1
    assert one(samples, "qlshadow_database_up") == 0
    assert one(samples, "process_resident_memory_bytes") > 0


def test_counters_lose_no_increment_across_threads():
    counters = metrics.Counters()

    def hammer():
        for _ in range(20000):
            counters.count_callback("ok")
    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counters.snapshot()["callbacks"]["ok"] == 80000


def test_each_app_counts_its_own_answers(app, client, auth, make_cron):
    from qlshadow.runtime import KEY
    from qlshadow.views import create_app
    assert send(client, auth, {"ids": [make_cron()["id"]], "status": 0}) == 200

    other = create_app(app.extensions["qlshadow"], init_db=False)

    assert other.extensions[KEY].counters.snapshot()["callbacks"]["ok"] == 0
    assert app.extensions[KEY].counters.snapshot()["callbacks"]["ok"] == 1


def test_the_storage_gauges_show_the_use_against_the_budget(scrape, settings, backend):
    samples = scrape()
    budget = samples.get(("qlshadow_storage_budget_bytes", frozenset()))
    used = samples.get(("qlshadow_storage_used_bytes", frozenset()))
    if backend == "postgres":  # the budget counts the SQLite files of the data dir only
        assert (budget, used) == (None, None)
        return
    assert budget == settings.storage_budget == 6 * 1024 * 1024
    assert 0 < used < budget
