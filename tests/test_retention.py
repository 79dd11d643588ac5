"""Retention on both databases: what the settings promise is deleted, nothing else; running
Runs and instances survive age; callbacks during `qlshadow prune` all succeed.

Rows are written through the real callback functions with a simulated clock (`now`), so a
test can make a Run thirty days old without waiting thirty days.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from qlshadow.storage import db, retention
from qlshadow.core.auth import TOKENS_KEPT_PER_APP, issue_token, system_token
from qlshadow.core.legacy import apply_status_callback, parse_status_callback
from qlshadow.storage.models import App, RunningInstance, ShadowRun, Token
from qlshadow.core.shadow import run_state
from qlshadow.core.shadow.ids import run_id
from qlshadow.core.shadow.writer import observe
from helpers import ROOT, SHADOW_ON, cli_env, http, run_cli

pytestmark = pytest.mark.shadow_on

DAY = 86400
NOW = 1_800_000_000
UUID_TAIL = "9d4a-4e6b-8f1a-2c3d4e5f6a7b"


def callback(cron_id: int, status: int, n: int, accepted: int, now: int) -> None:
    """One running (0) or idle (1) callback of execution n of a cron, at server time now."""
    cb = parse_status_callback({
        "ids": [cron_id], "status": status, "pid": 1000 + n, "log_path": f"{n}.log",
        "last_execution_time": accepted, "exit_code": 0,
        "execution_id": f"legacy-system:{accepted}:{n:08x}-{UUID_TAIL}"})
    with db.connected(), db.write_transaction():
        observe(cb, apply_status_callback(cb, now), now, 1000)


def execution(cron_id: int, n: int, started: int, finished: int | None) -> None:
    """Execution n: started (and, unless finished is None, finished) at those server times."""
    callback(cron_id, 0, n, started, started)
    if finished is not None:
        callback(cron_id, 1, n, started, finished)


def runs() -> dict:
    """{execution number: state} of every stored Run."""
    with db.connected():
        return {int.from_bytes(bytes(r.request_uuid)[:4], "big"): run_state(r.finished_at)
                for r in ShadowRun.select()}


def instances() -> dict:
    """{execution number: instance status} of every stored instance."""
    with db.connected():
        return {r.pid - 1000: r.status for r in RunningInstance.select()}


def prune(settings, now: int = NOW, **changes) -> dict:
    from dataclasses import replace
    return retention.prune(replace(settings, **changes), now)


def test_prune_deletes_runs_and_instances_finished_before_the_retention_days(
        settings, make_cron):
    cron = make_cron()["id"]
    execution(cron, 1, NOW - 40 * DAY, NOW - 40 * DAY + 60)  # old: goes
    execution(cron, 2, NOW - 31 * DAY, NOW - 31 * DAY + 60)  # old: goes
    execution(cron, 3, NOW - 29 * DAY, NOW - 29 * DAY + 60)  # within 30 days: stays
    execution(cron, 4, NOW - DAY, NOW - DAY + 60)

    done = prune(settings, retention_days=30)

    assert (done["runs"], done["instances"]) == (2, 2)
    assert runs() == {3: "exited", 4: "exited"}
    assert instances() == {3: 1, 4: 1}


def test_a_running_run_and_instance_survive_any_age(settings, make_cron):
    cron = make_cron()["id"]
    execution(cron, 1, NOW - 400 * DAY, None)  # still running after 400 days
    execution(cron, 2, NOW - 40 * DAY, NOW - 40 * DAY + 5)

    prune(settings, retention_days=30)

    assert runs() == {1: "running"}
    assert instances() == {1: 0}


def test_a_run_accepted_long_ago_but_finished_recently_is_kept(settings, make_cron):
    # A task clock far behind before NTP: the execution id says 2023, the server says now.
    cron = make_cron()["id"]
    callback(cron, 0, 1, 1_700_000_000, NOW - 60)
    callback(cron, 1, 1, 1_700_000_000, NOW)

    prune(settings, retention_days=30)

    assert runs() == {1: "exited"}


def test_the_row_cap_keeps_each_crons_newest_rows_whatever_their_state(settings, make_cron):
    a, b = make_cron(name="a")["id"], make_cron(name="b")["id"]
    for n in range(1, 7):
        execution(a, n, NOW - 600 + 60 * n, None if n in (1, 5) else NOW - 590 + 60 * n)
    execution(b, 10, NOW - 300, NOW - 200)

    done = prune(settings, retention_days=0, retention_rows_per_cron=3)

    # a's newest three stay (5 still running); 1 was superseded by five later executions.
    assert runs() == {4: "exited", 5: "running", 6: "exited", 10: "exited"}
    assert sorted(instances()) == [4, 5, 6, 10]
    assert (done["runs"], done["instances"]) == (3, 3)


def test_with_every_limit_off_nothing_is_deleted(settings, make_cron):
    cron = make_cron()["id"]
    for n in range(5):
        execution(cron, n, NOW - 900 * DAY + n, NOW - 900 * DAY + 60)

    done = prune(settings, retention_days=0, retention_rows_per_cron=0)

    assert (done["runs"], done["instances"], len(runs()), len(instances())) == (0, 0, 5, 5)


@pytest.mark.parametrize("shadow_env", [{**SHADOW_ON, "QL_RETENTION_ROWS_PER_CRON": "2",
                                         "QL_RETENTION_DAYS": "0"}])
def test_the_write_path_deletes_a_small_batch_every_n_callbacks(settings, make_cron):
    crons = [make_cron(name=f"c{i}")["id"] for i in range(2)]
    for cron in crons:  # beyond the cap by more than a batch, written with pruning idle
        for n in range(retention.WRITE_BATCH + 10):
            execution(cron, 100 * cron + n, NOW - 9000 + 60 * n, NOW - 9000 + 60 * n + 5)
    pruner = retention.Pruner(retention.policy_of(settings))  # its counter starts at 1
    before = len(runs())

    for _ in range(1, retention.PRUNE_EVERY):
        assert pruner.on_write(NOW) == 0  # between steps: nothing at all
    with db.connected(), db.write_transaction():
        deleted = pruner.on_write(NOW)

    assert deleted == 2 * retention.WRITE_BATCH  # one cron's runs and one cron's instances
    assert len(runs()) == before - retention.WRITE_BATCH


def test_an_age_step_deletes_exactly_its_batch_of_the_oldest_exited_runs(settings, make_cron):
    # Runs three to a second (the key orders them by id within it), two old ones running.
    cron = make_cron()["id"]
    old = NOW - 40 * DAY
    for n in range(20):
        finished = None if n in (3, 4) else old + 60 * (n // 3) + 5
        execution(cron, n, old + 60 * (n // 3), finished)
    execution(cron, 99, NOW - DAY, NOW - DAY + 5)  # young: never in reach
    cutoff = NOW - 30 * DAY

    with db.connected(), db.write_transaction():
        first = retention.expired_runs(cutoff, 7)
    left = runs()
    with db.connected(), db.write_transaction():
        second = retention.expired_runs(cutoff, 7)
        third = retention.expired_runs(cutoff, 7)
        last = retention.expired_runs(cutoff, 7)

    assert (first, second, third, last) == (7, 7, 4, 0)

    def key(n):  # the table's key of execution n's Run
        accepted = old + 60 * (n // 3)
        return accepted, run_id(f"legacy-system:{accepted}:{n:08x}-{UUID_TAIL}", accepted)
    exited_by_key = sorted((n for n in range(20) if n not in (3, 4)), key=key)
    assert set(left) == {3, 4, 99} | set(exited_by_key[7:])
    assert runs() == {3: "running", 4: "running", 99: "exited"}


@pytest.mark.parametrize("shadow_env", [{**SHADOW_ON, "QL_RETENTION_ROWS_PER_CRON": "5"}])
def test_steady_callbacks_hold_each_cron_near_its_cap(settings, make_cron):
    cron, pruner = make_cron()["id"], retention.Pruner(retention.policy_of(settings))
    for n in range(400):  # each execution is two callbacks: the write path runs twice
        execution(cron, n, NOW + 60 * n, NOW + 60 * n + 5)
        pruner.on_write(NOW + 60 * n)
        pruner.on_write(NOW + 60 * n)

    kept = runs()
    assert 5 <= len(kept) <= 5 + retention.PRUNE_EVERY
    assert max(kept) == 399


def use(settings) -> int:
    """Bytes counted against the storage budget now."""
    with db.connected():
        return retention.storage_use(retention.policy_of(settings))["used_bytes"]


def test_prune_gets_within_the_storage_budget_by_the_oldest_finished_rows(
        settings, make_cron, backend):
    cron = make_cron()["id"]
    limits_off = {"retention_days": 0, "retention_rows_per_cron": 0}
    execution(cron, 0, NOW - 9000, None)  # the oldest, still running: never over budget
    for n in range(1, 400):
        execution(cron, n, NOW - 9000 + 10 * n, NOW - 9000 + 10 * n + 5)
    prune(settings, storage_budget=0, **limits_off)  # a checkpoint: the WAL is empty
    full = use(settings)
    budget = full * 6 // 10

    done = prune(settings, storage_budget=budget, **limits_off)

    kept = runs()
    if backend == "postgres":  # the budget counts the SQLite files of the data dir only
        assert (done["over_budget"], len(kept)) == (0, 400)
        return
    assert done["over_budget"] > 0 and use(settings) <= budget
    assert kept[0] == "running"
    gone = set(range(400)) - kept.keys()
    assert gone and max(gone) < min(kept.keys() - {0})  # the oldest went, and only they
    assert set(instances()) == set(kept)  # instances went the same way, oldest first


def test_the_write_path_deletes_a_batch_of_the_oldest_finished_rows_while_over_budget(
        settings, make_cron, backend):
    from dataclasses import replace
    cron = make_cron()["id"]
    for n in range(200):
        execution(cron, n, NOW - 9000 + 10 * n, NOW - 9000 + 10 * n + 5)
    policy = retention.policy_of(replace(settings, retention_days=0, retention_rows_per_cron=0,
                                         storage_budget=1))  # always over
    pruner = retention.Pruner(policy)
    for _ in range(1, retention.PRUNE_EVERY):
        pruner.on_write(NOW)
    with db.connected(), db.write_transaction():
        deleted = pruner.on_write(NOW)

    if backend == "postgres":
        assert (policy.budget, deleted, len(runs())) == (0, 0, 200)
        return
    assert deleted == 2 * retention.WRITE_BATCH
    assert sorted(runs()) == list(range(retention.WRITE_BATCH, 200))


def test_health_shows_the_use_against_the_budget(client, settings, backend):
    storage = client.get("/health").get_json()["data"]["storage"]
    if backend == "postgres":  # no budget: it counts the SQLite files of the data dir
        assert (storage["budget_bytes"], storage["used_bytes"]) == (None, None)
        return
    assert storage["budget_bytes"] == settings.storage_budget == 6 * 1024 * 1024
    assert 0 < storage["used_bytes"] < storage["budget_bytes"]


def test_prune_deletes_expired_tokens_and_keeps_the_system_token(settings):
    with db.connected(), db.write_transaction():
        token = system_token(settings.token_file, now=NOW)
        app_id = App.get(App.name == "system").id
        Token.insert(token_hash="e" * 64, app=app_id, expiration=NOW - 1).execute()

    done = prune(settings)

    with db.connected():
        hashes = [t.token_hash for t in Token.select()]
    assert done["tokens"] == 1
    assert "e" * 64 not in hashes
    with open(settings.token_file) as fh:
        assert json.load(fh) == token
    assert len(hashes) == 1


def test_issuing_tokens_keeps_only_the_newest_per_app(settings):
    with db.connected(), db.write_transaction():
        app_id = App.get(App.name == "system").id
        issued = [issue_token(app_id, NOW + n)[0] for n in range(TOKENS_KEPT_PER_APP + 5)]
        stored = Token.select().where(Token.app == app_id).count()
        from qlshadow.core.auth import token_scopes
        valid = [token_scopes(value, NOW + 100) is not None for value in issued]

    assert stored == TOKENS_KEPT_PER_APP
    assert valid == [False] * 5 + [True] * TOKENS_KEPT_PER_APP


def test_the_prune_command_prints_what_it_deleted(settings, make_cron, backend):
    cron = make_cron()["id"]
    execution(cron, 1, 1_000_000, 1_000_060)  # 1970: long past any retention

    result = run_cli({**cli_env(settings), "QL_RETENTION_DAYS": "30"}, "prune")

    done = json.loads(result.stdout)
    reserve = {"reserve_released": False, "reserve": "in place"} if backend == "sqlite" else {}
    assert done == {"runs": 1, "instances": 1, "tokens": 0, "log_files": 0, "log_bytes": 0,
                    "over_budget": 0, **reserve}
    assert runs() == {}


@pytest.mark.parametrize("backend", ["sqlite"])
def test_prune_deletes_task_logs_beyond_the_count_and_age_and_nothing_else(settings):
    folder = os.path.join(settings.log_dir, "backup")
    os.makedirs(folder)
    names = [f"2027-01-{day:02d}-03-00-00-{100 + day}.log" for day in range(1, 11)]
    for name in names + ["notes.txt"]:
        with open(os.path.join(folder, name), "w") as fh:
            fh.write("x" * 10)
    now = 1_799_020_800  # 2027-01-04 00:00 UTC

    done = prune(settings, now=now, retention_logs_per_cron=4, retention_log_days=2)

    # Kept: the newest 4 by name; none of them is older than 2 days except the newest's
    # siblings within the count (age cuts 2027-01-01 and -02 as well, already beyond it).
    assert sorted(os.listdir(folder)) == sorted(names[-4:] + ["notes.txt"])
    assert (done["log_files"], done["log_bytes"]) == (6, 60)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_the_newest_log_of_a_cron_is_never_deleted_by_age(settings):
    folder = os.path.join(settings.log_dir, "rare")
    os.makedirs(folder)
    for name in ("2020-01-01-00-00-00-1.log", "2020-02-01-00-00-00-2.log"):
        open(os.path.join(folder, name), "w").close()

    prune(settings, retention_logs_per_cron=0, retention_log_days=7)

    assert os.listdir(folder) == ["2020-02-01-00-00-00-2.log"]


def test_callbacks_during_prune_all_succeed(live_server, make_settings):
    server = live_server(**SHADOW_ON, QL_RETENTION_ROWS_PER_CRON="3", QL_RETENTION_DAYS="0")
    status, body = http("POST", server.url + "/open/crons",
                        {"name": "job", "command": "task job.sh", "schedule": "* * * * *"},
                        server.headers)
    cron = body["data"]["id"]
    env = {**cli_env(make_settings()), "QL_RETENTION_ROWS_PER_CRON": "3",
           "QL_RETENTION_DAYS": "0"}
    answers, stop = [], threading.Event()

    def send():
        n = 0
        while not stop.is_set() or n < 200:
            for status_code in (0, 1):
                body = {"ids": [cron], "status": status_code, "pid": n, "log_path": f"{n}.log",
                        "execution_id": f"legacy-system:{1_800_000_000 + n}:{n:08x}-{UUID_TAIL}"}
                answers.append(http("PUT", server.url + "/open/crons/status", body,
                                    server.headers)[0])
            n += 1

    senders = [threading.Thread(target=send) for _ in range(2)]
    for thread in senders:
        thread.start()
    pruned = []
    for _ in range(5):
        full = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
        result = subprocess.run([sys.executable, "-m", "qlshadow.cli", "prune"],
                                env={**full, **env}, cwd=ROOT, capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0, result.stderr
        pruned.append(json.loads(result.stdout)["runs"])
    stop.set()
    for thread in senders:
        thread.join(120)

    assert len(answers) >= 800
    assert set(answers) == {200}
    assert sum(pruned) > 0
