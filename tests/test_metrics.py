"""GET /metrics: the Prometheus text format behind a `metrics` bearer token."""
from __future__ import annotations

import json
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from qlshadow.storage import db
from qlshadow.core.counters import Counters
from qlshadow.core.auth import create_app_record, issue_token
from qlshadow.storage.models import App, database
from helpers import ONE_BACKEND, STATUS_PATH, cli_env, run_cli

pytestmark = pytest.mark.shadow_on

EID = "legacy-system:{s}:{n:08x}-9d4a-4e6b-8f1a-2c3d4e5f6a7b"


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
    counters = Counters()

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
    from qlshadow.core.runtime import KEY
    from qlshadow.web.views import create_app
    assert send(client, auth, {"ids": [make_cron()["id"]], "status": 0}) == 200

    other = create_app(app.extensions["qlshadow"], init_db=False)

    assert other.extensions[KEY].counters.snapshot()["callbacks"]["ok"] == 0
    assert app.extensions[KEY].counters.snapshot()["callbacks"]["ok"] == 1


# --- per-cron health series, the host, the scrape token, the alert rules ----------------------

STATES = ("failed", "missed", "stuck", "late", "running", "new", "paused", "ok")


def cron_series(samples: dict, cron_id: int) -> dict:
    """{(sample name, state or None): value} of one cron's series."""
    found = {}
    for (name, labels), value in samples.items():
        labels = dict(labels)
        if labels.get("cron_id") == str(cron_id):
            found[(name, labels.get("state"))] = value
    return found


def test_a_cron_that_never_ran_has_every_series(make_cron, scrape):
    cron = make_cron(schedule="0 3 * * *")
    series = cron_series(scrape(), cron["id"])
    assert {state for name, state in series if name == "qlshadow_cron_state"} == set(STATES)
    assert series[("qlshadow_cron_state", "new")] == 1
    assert sum(v for (name, _), v in series.items() if name == "qlshadow_cron_state") == 1
    for name in ("qlshadow_cron_last_success_timestamp_seconds",
                 "qlshadow_cron_last_start_timestamp_seconds",
                 "qlshadow_cron_running_since_timestamp_seconds",
                 "qlshadow_cron_failures_total", "qlshadow_cron_missed_total"):
        assert series[(name, None)] == 0, name
    assert series[("qlshadow_cron_next_expected_timestamp_seconds", None)] > time.time()
    assert series[("qlshadow_cron_grace_seconds", None)] == 3600


def test_failures_and_the_state_follow_the_executions(client, auth, make_cron, scrape):
    cron = make_cron(schedule="@once")["id"]
    started = int(time.time())
    for pid, code in ((1, 0), (2, 3), (3, 1)):
        assert send(client, auth, {"ids": [cron], "status": 0, "pid": pid,
                                   "last_execution_time": started}) == 200
        assert send(client, auth, {"ids": [cron], "status": 1, "pid": pid,
                                   "exit_code": code}) == 200
    series = cron_series(scrape(), cron)
    assert series[("qlshadow_cron_state", "failed")] == 1
    assert series[("qlshadow_cron_failures_total", None)] == 2
    assert series[("qlshadow_cron_last_success_timestamp_seconds", None)] >= started
    assert series[("qlshadow_cron_last_start_timestamp_seconds", None)] == started
    assert send(client, auth, {"ids": [cron], "status": 0, "pid": 4,
                               "last_execution_time": started + 1}) == 200
    series = cron_series(scrape(), cron)
    assert series[("qlshadow_cron_running_since_timestamp_seconds", None)] == started + 1


def test_missed_firings_are_counted_from_the_stored_history(client, auth, scrape):
    from reconcile_history import fire, local_zone, new_cron
    with local_zone("UTC"):
        now = int(time.time())
        first = now - now % 600 - 12 * 600
        cron = new_cron(client, auth, "*/10 * * * *", first - 60)
        for at in range(first, now + 1, 600):
            if at not in (first + 3 * 600, first + 7 * 600):
                fire(client, auth, cron, at)
        series = cron_series(scrape(), cron)
    assert series[("qlshadow_cron_missed_total", None)] == 2


def test_firings_in_a_step_of_the_clock_are_not_counted_missed(client, auth, scrape):
    from qlshadow.core.runtime import record_step
    from reconcile_history import fire, local_zone, new_cron
    with local_zone("UTC"):
        now = int(time.time())
        first = now - now % 600 - 12 * 600
        cron = new_cron(client, auth, "*/10 * * * *", first - 60)
        skipped = (first + 3 * 600, first + 4 * 600)
        for at in range(first, now + 1, 600):
            if at not in skipped:
                fire(client, auth, cron, at)
        assert cron_series(scrape(), cron)[("qlshadow_cron_missed_total", None)] == 2
        record_step(1200, skipped[0] - 30, skipped[1] + 30, skipped[1] + 30)  # crond jumped both
        series = cron_series(scrape(), cron)
    assert series[("qlshadow_cron_missed_total", None)] == 0


def test_free_bytes_and_the_crontab_install_state_are_reported(make_settings, tmp_path):
    from qlshadow.web.views import create_app
    settings = make_settings(QL_SCHEDULER="system", QL_CRONTAB_INSTALL="true {file}",
                             QL_CRONTAB_LIST="")
    app = create_app(settings)
    try:
        client = app.test_client()
        headers = {"Authorization": f"Bearer {metrics_token(settings)}"}

        def installed():
            text = client.get("/metrics", headers=headers).get_data(as_text=True)
            wanted = ("qlshadow_crontab_installed ", "qlshadow_data_free_bytes ")
            lines = [line for line in text.splitlines() if line.startswith(wanted)]
            return dict(line.split() for line in lines)
        assert installed()["qlshadow_crontab_installed"] == "0"  # nothing synced yet
        assert int(installed()["qlshadow_data_free_bytes"]) > 0
        with db.database.connection_context(), db.write_transaction():
            from qlshadow.core.auth import system_token
            token = system_token(settings.token_file)["value"]
        assert client.post("/open/crons", json={"name": "a", "command": "true",
                                                "schedule": "* * * * *"},
                           headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert installed()["qlshadow_crontab_installed"] == "1"
    finally:
        db.discard_connection()


def metrics_token(settings) -> str:
    result = run_cli(cli_env(settings), "token", "metrics")
    assert result.stderr == ""
    return result.stdout.strip()


def test_the_metrics_token_never_expires_reads_only_metrics_and_can_be_revoked(
        app, settings, make_cron):
    from qlshadow.core.auth import METRICS_APP, NO_EXPIRY, sha256_hex
    from qlshadow.storage.models import Token
    from qlshadow.web.views import create_app
    first, second = metrics_token(settings), metrics_token(settings)
    assert first != second and len(first) >= 40
    with db.database.connection_context():
        rows = list(Token.select(Token.token_hash, Token.expiration).join(App)
                    .where(App.name == METRICS_APP).tuples())
    assert sorted(rows) == sorted([(sha256_hex(first), NO_EXPIRY), (sha256_hex(second), NO_EXPIRY)])
    client = app.test_client()
    headers = {"Authorization": f"Bearer {first}"}
    assert client.get("/metrics", headers=headers).status_code == 200
    assert client.get("/open/crons", headers=headers).status_code == 403
    revoked = run_cli(cli_env(settings), "token", "metrics", "--revoke")
    assert revoked.stdout.startswith("revoked 2 metrics token(s)")
    db.discard_connection()
    fresh = create_app(settings).test_client()  # a server that has not cached the token
    assert fresh.get("/metrics", headers=headers).status_code == 401


# The CI installs Debian's prometheus package (.ci/run); a laptop without it skips.
def promtool() -> str:
    import os
    import shutil

    from shellenv import IN_CI
    found = os.environ.get("QL_TEST_PROMTOOL") or shutil.which("promtool")
    if not found:
        message = "promtool is not installed (apt-get install prometheus)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return found


def test_the_example_alert_rules_pass_promtool_and_match_the_docs():
    import os
    import subprocess

    from helpers import ROOT
    rules = os.path.join(ROOT, "conf", "qlshadow-alerts.yml")
    result = subprocess.run([promtool(), "check", "rules", rules], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    with open(os.path.join(ROOT, "docs", "ALERTS.md"), encoding="utf-8") as fh:
        docs = fh.read()
    with open(rules, encoding="utf-8") as fh:
        assert "```yaml\n" + fh.read() + "```" in docs


@ONE_BACKEND
def test_the_exposition_passes_promtool_check_metrics(make_cron, app):
    import subprocess
    make_cron()
    settings = app.extensions["qlshadow"]
    response = app.test_client().get(
        "/metrics", headers={"Authorization": f"Bearer {metrics_token(settings)}"})
    result = subprocess.run([promtool(), "check", "metrics"], input=response.get_data(as_text=True),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_series_the_alert_rules_use_is_exposed(make_settings):
    import os
    import re

    from helpers import ROOT
    from qlshadow.web.views import create_app
    with open(os.path.join(ROOT, "conf", "qlshadow-alerts.yml"), encoding="utf-8") as fh:
        used = set(re.findall(r"\b(qlshadow_\w+)", fh.read()))
    settings = make_settings(QL_SCHEDULER="system", QL_CRONTAB_INSTALL="")
    app = create_app(settings)
    try:
        client = app.test_client()
        headers = {"Authorization": f"Bearer {metrics_token(settings)}"}
        with db.database.connection_context(), db.write_transaction():
            from qlshadow.service.crons import create
            create({"name": "a", "command": "true", "schedule": "0 3 * * *"})
        text = client.get("/metrics", headers=headers).get_data(as_text=True)
    finally:
        db.discard_connection()
    exposed = {line.split("{")[0].split()[0] for line in text.splitlines()
               if line and not line.startswith("#")}
    assert used and used <= exposed, used - exposed


RULE_TESTS = """\
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'qlshadow_cron_state{{cron_id="1",name="daily",state="missed"}}'
        values: '0 1 1 1'
      - series: 'qlshadow_cron_state{{cron_id="2",name="fine",state="missed"}}'
        values: '0 0 0 0'
      - series: 'qlshadow_cron_state{{cron_id="2",name="fine",state="failed"}}'
        values: '0 0 0 0'
      - series: 'qlshadow_data_free_bytes{{instance="router"}}'
        values: '1048576x10'
      - series: 'qlshadow_crontab_installed{{instance="router"}}'
        values: '1x10'
      - series: 'qlshadow_crond_running{{instance="router"}}'
        values: '1 1 0 0 0 0 0 0 0 0'
    alert_rule_test:
      - eval_time: 2m
        alertname: CronMissed
        exp_alerts:
          - exp_labels: {{severity: critical, cron_id: "1", name: daily, state: missed}}
            exp_annotations:
              summary: 'Cron daily (id 1) missed a firing'
              description: 'A scheduled firing has no record after its grace: crond did not start it,
                or its callbacks were lost.'
      - eval_time: 2m
        alertname: CronFailed
        exp_alerts: []
      - eval_time: 3m
        alertname: QlshadowDiskAlmostFull
        exp_alerts: []
      - eval_time: 6m
        alertname: QlshadowDiskAlmostFull
        exp_alerts:
          - exp_labels: {{severity: warning, instance: router}}
            exp_annotations:
              summary: 'Less than 2 MiB free for qlshadow on router'
              description: 'Run `qlshadow prune` or free space; a full disk fails every callback.'
      - eval_time: 5m
        alertname: QlshadowCrondNotRunning
        exp_alerts: []
      - eval_time: 8m
        alertname: QlshadowCrondNotRunning
        exp_alerts:
          - exp_labels: {{severity: critical, instance: router}}
            exp_annotations:
              summary: 'No cron daemon runs on router'
              description: 'The crontab is installed but nothing starts it: every firing will be missed.
                On OpenWrt: /etc/init.d/cron enable && /etc/init.d/cron start.'
"""


def test_the_alert_rules_fire_on_the_series_they_name(tmp_path):
    import os
    import subprocess

    from helpers import ROOT
    tests = tmp_path / "rules-test.yml"
    tests.write_text(RULE_TESTS.format(rules=os.path.join(ROOT, "conf", "qlshadow-alerts.yml")))
    result = subprocess.run([promtool(), "test", "rules", str(tests)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_storage_gauges_show_the_use_against_the_budget(scrape, settings, backend):
    samples = scrape()
    budget = samples.get(("qlshadow_storage_budget_bytes", frozenset()))
    used = samples.get(("qlshadow_storage_used_bytes", frozenset()))
    if backend == "postgres":  # the budget counts the SQLite files of the data dir only
        assert (budget, used) == (None, None)
        return
    assert budget == settings.storage_budget == 6 * 1024 * 1024
    assert 0 < used < budget
