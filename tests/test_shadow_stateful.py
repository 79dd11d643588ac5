"""Random interleavings of callbacks and cron edits against a reference model of CONTRACT.md §3.

The model below is written from the contract's words alone (it imports nothing from the
writer): a Run per execution, forward-only states, events added once, exact replay, and
drift of the task definition or the cron id refused with a `replay_drift` failure. After every step
the database (raw rows and GET /open/runs) must equal the model.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition,
                                 rule, run_state_machine_as_test)

from qlshadow.storage import db
from qlshadow.storage.models import Cron, RunningInstance, ShadowFailure, ShadowRun
from qlshadow.core.shadow.reader import logical_row
from helpers import SHADOW_ON, STATUS_PATH

EXECUTIONS = [f"legacy-system:{1764460800 + 60 * n}:{n:08x}-9d4a-4e6b-8f1a-2c3d4e5f6a7b"
              for n in range(4)]
COMMANDS = ["task backup.sh", "task backup.sh --full", "task other.sh"]
OK = b'{"code":200}\n'


def machine_for(client, auth):
    """A state machine class bound to one app's test client."""

    class ShadowModel(RuleBasedStateMachine):
        @initialize()
        def fresh_database(self):
            # One database serves every example: start each from empty tables.
            db.ensure_connection()
            with db.write_transaction():
                for model in (ShadowFailure, ShadowRun, RunningInstance, Cron):
                    model.delete().execute()
            self.definitions = {}  # cron id -> (name, command, schedule) as edited
            for name in ("alpha", "beta"):
                body = {"name": name, "command": COMMANDS[0], "schedule": "*/5 * * * *"}
                response = client.post("/open/crons", json=body, headers=auth)
                cron = response.get_json()["data"]
                self.definitions[cron["id"]] = (name, COMMANDS[0], "*/5 * * * *")
            self.crons = sorted(self.definitions)
            self.runs = {}  # execution id -> {cron, definition, state, events, exit_code}
            self.failures = []  # (reason, request_id, cron_id, drifted fields)
            self.last = None

        # --- the reference model -----------------------------------------------------

        def expect(self, execution, cron, status, exit_code):
            target = "running" if status == 0 else "exited"
            run = self.runs.get(execution)
            if run is None:
                self.runs[execution] = {
                    "cron": cron, "definition": self.definitions[cron], "state": target,
                    "events": ["accepted", "spawned", target],
                    "exit_code": exit_code if target == "exited" else None}
                return
            drifted = set()
            if self.definitions[cron] != run["definition"]:
                drifted.add("task_revision")
            if cron != run["cron"]:
                drifted.add("cron_id")
            if drifted:
                self.failures.append(("replay_drift", execution, cron, drifted))
            elif run["state"] == "running" and target == "exited":
                run.update(state="exited", exit_code=exit_code,
                           events=run["events"] + ["exited"])

        # --- the callbacks -----------------------------------------------------------

        def send(self, execution, cron, status, exit_code=0):
            body = {"ids": [cron], "status": status, "pid": 4000 + EXECUTIONS.index(execution),
                    "log_path": f"log/{execution[-4:]}.log", "last_execution_time": 1764460800,
                    "last_running_time": 3, "exit_code": exit_code, "execution_id": execution}
            response = client.put(STATUS_PATH, json=body, headers=auth)
            assert (response.status_code, response.data) == (200, OK)
            self.expect(execution, cron, status, exit_code)
            self.last = (execution, cron, status, exit_code)

        def home(self, execution):
            return self.crons[EXECUTIONS.index(execution) % 2]

        @rule(execution=st.sampled_from(EXECUTIONS))
        def start(self, execution):
            self.send(execution, self.home(execution), 0)

        @rule(execution=st.sampled_from(EXECUTIONS), exit_code=st.sampled_from([0, 1, 127]))
        def finish(self, execution, exit_code):
            self.send(execution, self.home(execution), 1, exit_code)

        @precondition(lambda self: self.last is not None)
        @rule()
        def duplicate(self):
            self.send(*self.last)

        @precondition(lambda self: any(r["state"] == "exited" for r in self.runs.values()))
        @rule(data=st.data())
        def late_start(self, data):
            done = sorted(e for e, r in self.runs.items() if r["state"] == "exited")
            execution = data.draw(st.sampled_from(done))
            self.send(execution, self.runs[execution]["cron"], 0)

        @rule(execution=st.sampled_from(EXECUTIONS), status=st.sampled_from([0, 1]))
        def drifted_cron(self, execution, status):
            other = self.crons[1 - self.crons.index(self.home(execution))]
            self.send(execution, other, status)

        @rule(index=st.sampled_from([0, 1]), command=st.sampled_from(COMMANDS))
        def edit_cron(self, index, command):
            cron = self.crons[index]
            response = client.put("/open/crons", json={"id": cron, "command": command},
                                  headers=auth)
            assert response.status_code == 200
            name, _, schedule = self.definitions[cron]
            self.definitions[cron] = (name, command, schedule)

        # --- the comparison ----------------------------------------------------------

        @invariant()
        def database_matches_the_model(self):
            db.ensure_connection()
            stored = {r["idempotency_key"]: r
                      for r in map(logical_row, ShadowRun.select().dicts())}
            assert {e: (r["cron_id"], r["state"], [i.split("@")[0] for i in r["events"].split()],
                        r["exit_code"]) for e, r in stored.items()} == {
                e: (r["cron"], r["state"], r["events"], r["exit_code"])
                for e, r in self.runs.items()}
            failures = list(ShadowFailure.select().order_by(ShadowFailure.id).dicts())
            assert [(f["reason"], f["request_id"], f["cron_id"]) for f in failures] == [
                f[:3] for f in self.failures]
            for row, (_, _, _, drifted) in zip(failures, self.failures, strict=True):
                named = {field for field in ("task_revision", "cron_id") if field in row["detail"]}
                assert named == drifted

        @invariant()
        def the_api_shows_the_same_runs(self):
            listed = client.get("/open/runs?limit=500", headers=auth).get_json()["data"]
            assert sorted((r["request_id"], r["state"], len(r["events"])) for r in listed) == sorted(
                (e, r["state"], len(r["events"])) for e, r in self.runs.items())

    return ShadowModel


@pytest.mark.parametrize("shadow_env", [SHADOW_ON])
def test_random_callback_interleavings_match_the_reference_model(client, auth):
    run_state_machine_as_test(machine_for(client, auth), settings=settings(
        max_examples=25, stateful_step_count=30, deadline=None, database=None,
        suppress_health_check=[HealthCheck.too_slow]))
