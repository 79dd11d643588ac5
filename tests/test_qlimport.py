"""`qlshadow import qinglong PATH`: QingLong's crons come over with their ids, once.

The QingLong side is made here as QingLong makes it: a database.sqlite with Sequelize's
Crontabs table (the column set of QingLong 2.x's back/data/cron.ts plus the columns its
db loader adds), or a NeDB crontab.db of JSON lines. Our side runs on both backends.
"""
from __future__ import annotations

import json
import os
import sqlite3

import pytest

from qlshadow.storage import db
from qlshadow.storage.models import Cron, ShadowRun
from helpers import run_cli, table_rows

# QingLong 2.x's Crontabs table as Sequelize creates it on SQLite.
CRONTABS = """CREATE TABLE IF NOT EXISTS `Crontabs` (`id` INTEGER PRIMARY KEY AUTOINCREMENT,
 `name` VARCHAR(255), `command` VARCHAR(255), `schedule` VARCHAR(255),
 `timestamp` VARCHAR(255), `saved` TINYINT(1), `status` NUMBER, `isSystem` NUMBER,
 `pid` NUMBER, `isDisabled` NUMBER, `isPinned` NUMBER, `log_path` VARCHAR(255),
 `labels` JSON, `last_running_time` NUMBER, `last_execution_time` NUMBER, `sub_id` NUMBER,
 `extra_schedules` JSON, `task_before` TEXT, `task_after` TEXT, `log_name` VARCHAR(255),
 `allow_multiple_instances` NUMBER, `createdAt` DATETIME NOT NULL, `updatedAt` DATETIME NOT NULL,
 UNIQUE (`name`, `command`, `schedule`))"""

STAMP = "2024-03-01 08:00:00.000 +00:00"


def qinglong_row(cron_id: int, name: str, command: str, schedule: str, **extra) -> dict:
    row = {"id": cron_id, "name": name, "command": command, "schedule": schedule,
           "timestamp": "Fri Mar 01 2024 16:00:00 GMT+0800", "saved": 1, "status": 1,
           "isSystem": 0, "pid": None, "isDisabled": 0, "isPinned": 0, "log_path": "",
           "labels": "[]", "last_running_time": 12, "last_execution_time": 1709280000,
           "sub_id": None, "extra_schedules": None, "task_before": None, "task_after": None,
           "log_name": None, "allow_multiple_instances": None, "createdAt": STAMP,
           "updatedAt": STAMP}
    row.update(extra)
    return row


def qinglong_sqlite(folder, rows: list) -> str:
    """A QingLong data dir whose db/database.sqlite holds rows; returns the data dir."""
    os.makedirs(folder / "db", exist_ok=True)
    conn = sqlite3.connect(folder / "db" / "database.sqlite")
    conn.execute(CRONTABS)
    for row in rows:
        conn.execute(f"INSERT INTO Crontabs ({', '.join(row)}) VALUES "
                     f"({', '.join('?' * len(row))})", list(row.values()))
    conn.commit()
    conn.close()
    return str(folder)


ROWS = [
    qinglong_row(3, "beans", "task jd_bean.js", "*/5 * * * *", labels='["jd"]'),
    qinglong_row(7, "sign", "task sign.py now", "0 6 * * *", isDisabled=1,
                 extra_schedules='[{"schedule": "0 18 * * *"}]', task_before="echo before",
                 task_after="echo after", log_name="signing", allow_multiple_instances=1),
    qinglong_row(12, "seconds", "task tick.sh", "*/30 * * * * *"),
]


@pytest.fixture
def target(make_settings, tmp_path):
    """Our side: settings with a recording crontab install, its schema, and the CLI env."""
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "current").write_text("")
    install = f"sh -c 'cat \"$0\" > {spool}/current; echo installed >> {spool}/installs' {{file}}"
    env = {"QL_SCHEDULER": "system", "QL_CRONTAB_INSTALL": install,
           "QL_CRONTAB_LIST": f"cat {spool}/current"}
    settings = make_settings(**env)
    db.open_database(settings)

    class Target:
        cli = {"QL_DATA_DIR": settings.data_dir, "QL_DB_URL": settings.db_url, **env}

        @staticmethod
        def run(*args, check=False):
            return run_cli(Target.cli, "import", "qinglong", *args, check=check)

        @staticmethod
        def installs() -> int:
            path = spool / "installs"
            return len(path.read_text().splitlines()) if path.exists() else 0

        @staticmethod
        def crontab() -> str:
            return (spool / "current").read_text()

    Target.settings = settings
    yield Target
    db.discard_connection()


def crons() -> dict:
    return {row["id"]: row for row in table_rows(Cron)}


def outcomes(stdout: str) -> dict:
    """{QingLong id: (our id, outcome)} from the printed table, cut at the titles' columns."""
    lines = stdout.splitlines()
    at = [lines[0].index(title) for title in ("name", "outcome", "reason")]
    found = {}
    for line in lines[1:-1]:
        source, cron_id = line[:at[0]].rsplit(None, 1)  # the id column is right-aligned
        found[source.strip()] = (cron_id, line[at[1]:at[2]].strip())
    return found


def test_every_cron_comes_over_with_its_id_and_fields(target, tmp_path):
    result = target.run(qinglong_sqlite(tmp_path / "ql", ROWS))
    assert result.returncode == 0, result.stderr
    rows = crons()
    assert sorted(rows) == [3, 7, 12]
    sign = rows[7]
    assert (sign["name"], sign["command"], sign["schedule"]) == ("sign", "task sign.py now", "0 6 * * *")
    assert json.loads(sign["extra_schedules"]) == [{"schedule": "0 18 * * *"}]
    assert (sign["task_before"], sign["task_after"], sign["log_name"]) == (
        "echo before", "echo after", "signing")
    assert (sign["is_disabled"], sign["allow_multiple_instances"]) == (1, 1)
    beans = rows[3]
    assert (beans["is_disabled"], beans["allow_multiple_instances"], beans["extra_schedules"]) == (0, 0, None)
    # QingLong's run state stays QingLong's: no run has happened here.
    assert beans["last_execution_time"] is None and beans["last_running_time"] is None
    assert outcomes(result.stdout) == {"3": ("3", "imported"), "7": ("7", "imported"),
                                       "12": ("12", "imported")}
    assert result.stdout.splitlines()[0].split() == ["qinglong", "id", "id", "name", "outcome", "reason"]
    assert result.stdout.splitlines()[-1] == "imported 3, kept 0, refused 0"
    # One install covers the whole import; only the enabled 5-field cron is an active line.
    assert target.installs() == 1
    active = [line for line in target.crontab().splitlines() if line.startswith("*/5 ")]
    assert len(active) == 1 and " ID=3 " in active[0]


def test_imported_crons_run_on_the_importing_host_only(target, tmp_path):
    # As a cron created here: on a fleet's database an imported cron must not run on every
    # host at once.
    result = target.run(qinglong_sqlite(tmp_path / "ql", ROWS))
    assert result.returncode == 0, result.stderr
    assert {json.loads(row["hosts"])[0] for row in crons().values()} == {
        target.settings.host_name}


def test_a_dry_run_prints_the_plan_and_writes_nothing(target, tmp_path):
    source = qinglong_sqlite(tmp_path / "ql", ROWS)
    files = sorted(os.listdir(target.settings.data_dir))
    result = target.run(source, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert outcomes(result.stdout)["7"] == ("7", "would import")
    assert result.stdout.splitlines()[-1] == ("would import 3, kept 0, refused 0; nothing was "
                                              "written (dry run)")
    assert crons() == {}
    assert target.installs() == 0
    assert sorted(os.listdir(target.settings.data_dir)) == files


def test_a_dry_run_before_the_first_start_creates_no_database(tmp_path):
    data = tmp_path / "data"
    env = {"QL_DATA_DIR": str(data), "QL_DB_URL": f"sqlite:///{tmp_path}/never.db",
           "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": ""}
    result = run_cli(env, "import", "qinglong", qinglong_sqlite(tmp_path / "ql", ROWS[:1]),
                     "--dry-run")
    assert "would import" in result.stdout
    assert not os.path.exists(tmp_path / "never.db") and not os.path.exists(data)


def test_a_second_import_changes_nothing(target, tmp_path):
    source = qinglong_sqlite(tmp_path / "ql", ROWS)
    assert target.run(source).returncode == 0
    before, installed = crons(), target.crontab()
    again = target.run(source)
    assert again.returncode == 0, again.stderr
    assert crons() == before
    assert set(outcomes(again.stdout).values()) == {("3", "kept"), ("7", "kept"), ("12", "kept")}
    assert target.installs() == 1 and target.crontab() == installed


def test_an_id_taken_by_a_different_cron_is_refused_and_the_rest_imported(target, tmp_path):
    with db.database.connection_context():
        Cron.insert(id=7, name="mine", command="echo mine", schedule="0 1 * * *",
                    created_at=1, updated_at=1).execute()
    result = target.run(qinglong_sqlite(tmp_path / "ql", ROWS))
    assert result.returncode == 1
    assert outcomes(result.stdout)["7"] == ("7", "refused")
    assert "id 7 is already the cron 'mine' here, which differs in name, command, schedule" in result.stdout
    rows = crons()
    assert sorted(rows) == [3, 7, 12] and rows[7]["command"] == "echo mine"
    assert target.installs() == 1


def test_forms_we_cannot_run_are_refused_with_the_reason(target, tmp_path):
    rows = [qinglong_row(1, "per account", "task jd.js conc JD_COOKIE 1-3", "0 * * * *"),
            qinglong_row(2, "options", "task -m 300 jd.js", "0 * * * *"),
            qinglong_row(3, "panel", "ql update", "0 4 * * *"),
            qinglong_row(4, "bad schedule", "task a.js", "61 * * * *"),
            qinglong_row(5, "fine", "task a.js", "0 * * * *")]
    result = target.run(qinglong_sqlite(tmp_path / "ql", rows))
    assert result.returncode == 1
    found = outcomes(result.stdout)
    assert [found[str(n)][1] for n in range(1, 6)] == ["refused"] * 4 + ["imported"]
    assert "`task FILE conc`" in result.stdout and "`task -m`" in result.stdout
    assert "`ql` command" in result.stdout and "'schedule'" in result.stdout
    assert sorted(crons()) == [5]


def test_an_id_whose_runs_outlived_its_cron_is_not_given_again(target, tmp_path):
    with db.database.connection_context():
        ShadowRun.insert(accepted_at=1700000000, id=b"\x01" * 16, request_uuid=b"\x02" * 16,
                         cron_id=3, task_revision=b"\x03" * 32, origin=0, created_after=0,
                         created_running=1).execute()
    result = target.run(qinglong_sqlite(tmp_path / "ql", ROWS))
    assert outcomes(result.stdout)["3"] == ("3", "refused")
    assert "Runs are kept here" in result.stdout
    assert sorted(crons()) == [7, 12]


def test_crons_created_after_an_import_take_new_ids(target, tmp_path):
    rows = [qinglong_row(1, "a", "task a.js", "0 * * * *"),
            qinglong_row(2, "b", "task b.js", "0 * * * *")]
    assert target.run(qinglong_sqlite(tmp_path / "ql", rows)).returncode == 0
    made = run_cli(target.cli, "cron", "add", "0 2 * * *", "echo new", "--json")
    assert json.loads(made.stdout)["id"] == 3


def test_an_id_out_of_range_is_refused(target, tmp_path):
    result = target.run(qinglong_sqlite(tmp_path / "ql", [
        qinglong_row(2**31, "huge", "task a.js", "0 * * * *")]))
    assert result.returncode == 1 and "outside 1..2147483647" in result.stdout
    assert crons() == {}


# --- NeDB (QingLong before 2.11) ------------------------------------------------------------

def nedb_line(_id: str, name: str, command: str, schedule: str, **extra) -> str:
    doc = {"name": name, "command": command, "schedule": schedule, "saved": True, "_id": _id,
           "created": 1620000000000, "status": 1, "timestamp": "Mon May 03 2021",
           "isSystem": 0, "isDisabled": 0, "log_path": "", "isPinned": 0, "labels": [],
           "last_running_time": 0, "last_execution_time": 0, **extra}
    return json.dumps(doc, ensure_ascii=False)


def qinglong_nedb(folder) -> str:
    os.makedirs(folder / "db", exist_ok=True)
    lines = [
        nedb_line("5", "old name", "task a.js", "0 1 * * *"),
        nedb_line("Xk3pQ9aZ", "lettered", "task b.py", "0 2 * * *"),
        nedb_line("9", "gone", "task c.sh", "0 3 * * *"),
        nedb_line("5", "renamed", "task a.js", "0 1 * * *", isDisabled=1),  # supersedes
        json.dumps({"$$deleted": True, "_id": "9"}),
        json.dumps({"$$indexCreated": {"fieldName": "name", "unique": False}}),
        "{not json",
    ]
    (folder / "db" / "crontab.db").write_text("\n".join(lines) + "\n")
    return str(folder)


def test_nedb_documents_come_over_in_their_latest_version_deleted_ones_not(target, tmp_path):
    source = qinglong_nedb(tmp_path / "ql")
    result = target.run(source)
    assert result.returncode == 1  # the line that is no document is refused
    rows = crons()
    assert sorted(rows)[0] == 5 and len(rows) == 2
    assert (rows[5]["name"], rows[5]["is_disabled"]) == ("renamed", 1)
    new_id = max(rows)
    assert new_id > 5 and rows[new_id]["name"] == "lettered"
    found = outcomes(result.stdout)
    assert found["'5'"] == ("5", "imported")
    assert found["'Xk3pQ9aZ'"] == (str(new_id), "imported")
    assert found["line 7"] == ("-", "refused") and "line 7 is not a NeDB document" in result.stdout
    assert "new id" in result.stdout

    again = target.run(source)
    assert crons() == rows
    found = outcomes(again.stdout)
    assert found["'5'"] == ("5", "kept") and found["'Xk3pQ9aZ'"] == (str(new_id), "kept")
    assert target.installs() == 1


def test_a_path_without_a_qinglong_database_is_one_clear_line(target, tmp_path):
    (tmp_path / "empty").mkdir()
    result = target.run(str(tmp_path / "empty"))
    assert result.returncode == 1
    assert "holds no QingLong database" in result.stderr and "Traceback" not in result.stderr


# --- the API refuses `task` forms we do not run ---------------------------------------------

@pytest.mark.parametrize("command, named", [
    ("task jd.js conc JD_COOKIE", "`task FILE conc`"),
    ("task jd.js desi JD_COOKIE 1 3", "`task FILE desi`"),
    ("task -m 300 jd.js", "`task -m`"),
    ("task -l jd.js", "`task -l`"),
    ("  task", "needs a script file"),
])
def test_the_api_refuses_task_forms_we_do_not_run(client, auth, make_cron, command, named):
    response = client.post("/open/crons", json={"name": "x", "command": command,
                                                "schedule": "0 * * * *"}, headers=auth)
    assert response.status_code == 400
    message = response.get_json()["message"]
    assert message.startswith("'command'") and named in message
    cron = make_cron(command="task jd.js now && echo done")
    response = client.put("/open/crons", json={"id": cron["id"], "command": command}, headers=auth)
    assert response.status_code == 400 and named in response.get_json()["message"]
    assert client.get(f"/open/crons/{cron['id']}", headers=auth).get_json()["data"]["command"] == \
        "task jd.js now && echo done"
