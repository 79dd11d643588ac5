"""Many crond jobs reporting at once: concurrent keep-alive clients send running/idle pairs
through a real waitress server; every callback gets 200 and the database stays consistent.
No timing is asserted."""
from __future__ import annotations

import json
import threading
from collections import Counter
from http.client import HTTPConnection

import pytest

from qlshadow.storage.models import Cron, RunningInstance
from helpers import http, table_rows

CRONS = 8
START = 1764489600


def _bodies(cron_id: int, client: int, per_client: int) -> list:
    """Alternating running/idle bodies as the 2.x shell sends them; every third run fails."""
    bodies = []
    for run in range(per_client // 2):
        base = {"ids": [str(cron_id)], "pid": str(20000 + client),
                "log_path": f"job{client}/{run}.log", "last_execution_time": START + run}
        bodies.append(json.dumps({**base, "status": "0"}).encode())
        bodies.append(json.dumps({**base, "status": "1", "last_running_time": 7,
                                  "exit_code": run % 3}).encode())
    return bodies


def _hammer(server, cron_ids: list, clients: int, per_client: int) -> list:
    """Send every client's callbacks on its own keep-alive connection; returns the failures."""
    failures = []
    headers = {**server.headers, "Content-Type": "application/json"}

    def client(number: int) -> None:
        bodies = _bodies(cron_ids[number % len(cron_ids)], number, per_client)
        connection = HTTPConnection("127.0.0.1", server.port, timeout=60)
        try:
            for body in bodies:
                connection.request("PUT", "/open/crons/status", body=body, headers=headers)
                response = connection.getresponse()
                answer = response.read()
                if response.status != 200 or answer != b'{"code":200}\n':
                    failures.append((response.status, answer[:200]))
        except Exception as exc:  # a dropped connection is a failure too, not a thread crash
            failures.append(("exception", repr(exc)))
        finally:
            connection.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failures


def _create_crons(server) -> list:
    ids = []
    for n in range(CRONS):
        status, body = http("POST", server.url + "/open/crons", headers=server.headers,
                            body={"name": f"job{n}", "command": f"task job{n}.sh", "schedule": "* * * * *"})
        assert status == 200
        ids.append(body["data"]["id"])
    return ids


def _assert_consistent(cron_ids: list, clients: int, per_client: int) -> None:
    runs = per_client // 2
    instances = table_rows(RunningInstance)
    assert len(instances) == clients * runs
    assert [r for r in instances if r["finished_at"] is None or r["status"] == 0] == []
    assert all(r["status"] == (3 if r["exit_code"] else 1) for r in instances)
    assert Counter((r["cron"], r["pid"]) for r in instances) == {
        (cron_ids[n % len(cron_ids)], 20000 + n): runs for n in range(clients)}
    assert Counter(r["exit_code"] for r in instances) == Counter(
        run % 3 for _ in range(clients) for run in range(runs))
    crons = table_rows(Cron)
    assert all(r["last_running_time"] == 7 and r["pid"] is not None for r in crons)


@pytest.mark.slow  # a load: 16,000 callbacks
@pytest.mark.parametrize("backend", ["sqlite"])
def test_16_clients_sending_1000_callbacks_each_on_sqlite_all_get_200(app, live_server):
    server = live_server()
    cron_ids = _create_crons(server)

    failures = _hammer(server, cron_ids, clients=16, per_client=1000)

    assert failures == []
    assert "database is locked" not in server.output()
    _assert_consistent(cron_ids, clients=16, per_client=1000)


@pytest.mark.parametrize("backend", ["postgres"])
def test_8_clients_sending_100_callbacks_each_on_postgres_all_get_200(app, live_server):
    server = live_server()
    cron_ids = _create_crons(server)

    failures = _hammer(server, cron_ids, clients=8, per_client=100)

    assert failures == []
    assert "Traceback" not in server.output()
    _assert_consistent(cron_ids, clients=8, per_client=100)
