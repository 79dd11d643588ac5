"""The database belongs to the app: two apps over two SQLite files in one process each
answer from and write to their own, whichever was made last."""
from __future__ import annotations

import sqlite3
import uuid

from qlshadow import config
from qlshadow.core.auth import system_token
from qlshadow.storage import db
from qlshadow.storage.models import Cron, RunningInstance
from qlshadow.web.views import create_app


def _app_and_auth(data_dir) -> tuple:
    settings = config.load(environ={"QL_DATA_DIR": str(data_dir), "QL_SCHEDULER": "node",
                                    "QL_CRONTAB_INSTALL": ""})
    app = create_app(settings)
    with db.database.connection_context(), db.write_transaction():  # the one opened last
        token = system_token(settings.token_file)["value"]
    return app.test_client(), {"Authorization": f"Bearer {token}"}


def _rows(path, table: str, column: str) -> list:
    connection = sqlite3.connect(path)
    try:
        return [row[0] for row in connection.execute(f"SELECT {column} FROM {table} ORDER BY 1")]
    finally:
        connection.close()


def test_two_apps_in_one_process_each_write_only_their_own_database(tmp_path):
    clients = {name: _app_and_auth(tmp_path / name) for name in ("a", "b")}
    ids = {}
    for name in ("a", "b"):  # "a" first: its app is not the one opened last
        client, auth = clients[name]
        made = client.post("/open/crons", headers=auth, json={
            "name": f"only-{name}", "command": "true", "schedule": "* * * * *"})
        assert made.status_code == 200, made.get_json()
        ids[name] = made.get_json()["data"]["id"]
    for name in ("a", "b"):
        client, auth = clients[name]
        for status in (0, 1):
            answer = client.put("/open/crons/status", headers=auth, json={
                "ids": [ids[name]], "status": status, "pid": 1, "log_path": f"{name}/1.log",
                "execution_id": f"legacy-system:1764460800:{uuid.UUID(int=1, version=4)}"})
            assert answer.status_code == 200, answer.get_json()
        assert client.get(f"/open/crons/{ids[name]}", headers=auth).get_json()["data"]["name"] == (
            f"only-{name}")
    db.discard_connection()

    for name in ("a", "b"):
        path = tmp_path / name / "qlshadow.db"
        assert _rows(path, Cron._meta.table_name, "name") == [f"only-{name}"]
        assert _rows(path, RunningInstance._meta.table_name, "log_path") == [f"{name}/1.log"]


def test_a_write_held_open_on_one_apps_database_does_not_hold_up_the_others(tmp_path):
    # Each SQLite database has its own write lock: a long transaction on "a" (a prune, an
    # install's dry run) must not make "b"'s callbacks wait.
    import threading

    from qlshadow.core.runtime import KEY as RUNTIME_KEY
    from qlshadow.storage.models import database as models
    (client_a, _), (client_b, auth_b) = (_app_and_auth(tmp_path / n) for n in ("a", "b"))
    database_a = client_a.application.extensions[RUNTIME_KEY].database
    holding, release = threading.Event(), threading.Event()

    def hold_a():
        models.bind_thread(database_a)
        with database_a.connection_context(), db.write_transaction():
            holding.set()
            release.wait(30)

    holder, writer = threading.Thread(target=hold_a), None
    holder.start()
    try:
        assert holding.wait(10)
        answers = []
        writer = threading.Thread(target=lambda: answers.append(client_b.put(
            "/open/crons/status", headers=auth_b, json={"ids": [1], "status": 0})))
        writer.start()
        writer.join(10)
        assert [a.status_code for a in answers] == [200]
    finally:
        release.set()
        holder.join(30)
        if writer is not None:
            writer.join(30)
    db.discard_connection()
