"""The `qlshadow` command (CONTRACT.md §10): db init, app create,
cron add|list|show|rm|enable|disable, serve keeping data, and --help everywhere. Commands
run as real child processes."""
from __future__ import annotations

import json

import pytest

from qlshadow.storage import db
from qlshadow.cli import main
from qlshadow.storage.models import App, Cron, RunningInstance, Token
from helpers import Serve, clean_env, cli_env, fixture_body, http, run_cli, table_rows

TABLES = {"crons", "running_instances", "apps", "tokens", "shadow_runs", "shadow_failures"}


@pytest.fixture
def env(make_settings) -> dict:
    """CLI environment on this test's fresh (still empty) database."""
    return cli_env(make_settings())


def _tables() -> set:
    with db.database.connection_context():
        return set(db.database.get_tables())


def _bind(make_settings) -> None:
    settings = make_settings()
    db.bind(db.make_database(settings.db_url, settings.db_timeout))


def _one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


# --- db init --------------------------------------------------------------------------------

def test_db_init_creates_the_tables_and_the_system_app(env, make_settings):
    result = run_cli(env, "db", "init")

    _bind(make_settings)
    assert result.returncode == 0 and "database ready" in result.stdout
    assert TABLES <= _tables()
    assert [(r["name"], r["scopes"]) for r in table_rows(App)] == [("system", "crons,runs")]


def test_db_init_twice_over_a_populated_database_keeps_every_row(app, client, auth, make_cron):
    cron = make_cron()
    client.put("/open/crons/status", headers=auth,
               json=fixture_body("callback_running", ids=[str(cron["id"])]))
    before = [table_rows(m) for m in (Cron, RunningInstance, App, Token)]
    db.discard_connection()

    run_cli(cli_env(app.extensions["qlshadow"]), "db", "init")
    run_cli(cli_env(app.extensions["qlshadow"]), "db", "init")

    assert [table_rows(m) for m in (Cron, RunningInstance, App, Token)] == before
    assert client.get(f"/open/crons/{cron['id']}", headers=auth).get_json()["data"]["status"] == 0


def test_db_init_recreates_a_missing_table_beside_populated_ones(app, make_cron):
    make_cron()
    crons_before = table_rows(Cron)
    with db.database.connection_context():
        db.database.execute_sql("DROP TABLE running_instances")

    run_cli(cli_env(app.extensions["qlshadow"]), "db", "init")

    assert "running_instances" in _tables()
    assert table_rows(Cron) == crons_before


def test_the_first_serve_creates_the_schema_and_the_system_app(env, make_settings, tmp_path):
    with Serve(env=clean_env({**env, "QL_HOST": "127.0.0.1", "QL_PORT": "0"}),
               log_path=str(tmp_path / "serve.log")):
        pass

    _bind(make_settings)
    assert TABLES <= _tables()
    assert [r["name"] for r in table_rows(App)] == ["system"]


def test_serve_keeps_every_row_of_an_existing_database(app, client, auth, make_cron, live_server):
    cron = make_cron()
    crons_before, apps_before = table_rows(Cron), table_rows(App)
    db.discard_connection()

    server = live_server()

    status, shown = http("GET", f"{server.url}/open/crons/{cron['id']}", headers=server.headers)
    assert (status, shown["data"]["name"]) == (200, "backup")
    assert table_rows(Cron) == crons_before
    assert table_rows(App) == apps_before


def test_db_init_reports_an_unreachable_database_in_one_line(tmp_path):
    env = {"QL_DATA_DIR": str(tmp_path), "QL_DB_URL": "postgresql://postgres@127.0.0.1:1/none",
           "QL_SCHEDULER": "node", "QL_DB_TIMEOUT": "1"}

    assert "database" in _one_error_line(run_cli(env, "db", "init", check=False))


def test_serve_reports_an_unreachable_database_in_one_line(tmp_path):
    env = {"QL_DATA_DIR": str(tmp_path), "QL_DB_URL": "postgresql://postgres@127.0.0.1:1/none",
           "QL_SCHEDULER": "node", "QL_DB_TIMEOUT": "1", "QL_PORT": "0"}

    assert "database" in _one_error_line(run_cli(env, "serve", check=False))


# --- app create -----------------------------------------------------------------------------

def test_app_create_prints_credentials_that_get_a_working_token(app, client):
    result = run_cli(cli_env(app.extensions["qlshadow"]), "app", "create", "reporter",
                     "--scopes", "crons,runs")

    printed = json.loads(result.stdout)
    assert (printed["name"], printed["scopes"]) == ("reporter", ["crons", "runs"])
    response = client.get("/open/auth/token", query_string={
        "client_id": printed["client_id"], "client_secret": printed["client_secret"]})
    token = response.get_json()["data"]["token"]
    assert client.get("/open/crons", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_app_create_prints_the_scopes_as_stored(app):
    printed = json.loads(run_cli(cli_env(app.extensions["qlshadow"]), "app", "create", "spaced",
                                 "--scopes", "runs, crons").stdout)

    [row] = [r for r in table_rows(App) if r["name"] == "spaced"]
    assert printed["scopes"] == row["scopes"].split(",") == ["crons", "runs"]


def test_app_create_with_one_scope_gives_only_that_scope(app, client):
    printed = json.loads(run_cli(cli_env(app.extensions["qlshadow"]), "app", "create", "runner",
                                 "--scopes", "runs").stdout)

    token = client.get("/open/auth/token", query_string={
        "client_id": printed["client_id"], "client_secret": printed["client_secret"]}
    ).get_json()["data"]["token"]
    assert client.get("/open/crons", headers={"Authorization": f"Bearer {token}"}).status_code == 403


def test_app_create_refuses_a_duplicate_name_in_one_line(app):
    env = cli_env(app.extensions["qlshadow"])
    run_cli(env, "app", "create", "reporter")

    result = run_cli(env, "app", "create", "reporter", check=False)

    assert "reporter" in _one_error_line(result)
    assert [r["name"] for r in table_rows(App)].count("reporter") == 1


def test_app_create_refuses_the_system_name_in_one_line(app):
    result = run_cli(cli_env(app.extensions["qlshadow"]), "app", "create", "system", check=False)

    assert "system" in _one_error_line(result)


def test_app_create_refuses_an_unknown_scope_in_one_line(app):
    result = run_cli(cli_env(app.extensions["qlshadow"]), "app", "create", "x", "--scopes", "crons,admin",
                     check=False)

    assert "scopes" in _one_error_line(result)
    assert "x" not in [r["name"] for r in table_rows(App)]


# --- token system ---------------------------------------------------------------------------

def test_token_system_on_a_fresh_database_creates_the_schema_and_the_token(env, make_settings):
    result = run_cli(env, "token", "system")

    _bind(make_settings)
    assert result.stdout.strip() == env["QL_DATA_DIR"] + "/token.json"
    with open(result.stdout.strip(), encoding="utf-8") as fh:
        assert set(json.load(fh)) == {"value", "expiration"}
    assert len(table_rows(Token)) == 1


# --- cron -----------------------------------------------------------------------------------

def test_cron_add_creates_a_cron_and_prints_it(app, client, auth):
    result = run_cli(cli_env(app.extensions["qlshadow"]), "cron", "add", "*/5 * * * *",
                     "task backup.sh", "--name", "backup", "--json")

    printed = json.loads(result.stdout)
    shown = client.get(f"/open/crons/{printed['id']}", headers=auth).get_json()["data"]
    assert (shown["name"], shown["command"], shown["schedule"]) == ("backup", "task backup.sh", "*/5 * * * *")
    assert printed == shown


def test_cron_add_names_the_cron_after_its_command_by_default(app):
    run_cli(cli_env(app.extensions["qlshadow"]), "cron", "add", "@boot", "task boot.sh")

    assert [r["name"] for r in table_rows(Cron)] == ["task boot.sh"]


def test_cron_add_refuses_a_bad_schedule_in_one_line(app):
    result = run_cli(cli_env(app.extensions["qlshadow"]), "cron", "add", "61 * * * *", "task x.sh",
                     check=False)

    assert "'61 * * * *'" in _one_error_line(result)
    assert table_rows(Cron) == []


def test_cron_list_prints_the_crons_newest_first(app, make_cron):
    ids = [make_cron(name=f"job{n}")["id"] for n in range(3)]

    result = run_cli(cli_env(app.extensions["qlshadow"]), "cron", "list", "--json")

    assert [c["id"] for c in json.loads(result.stdout)] == ids[::-1]


def test_cron_show_prints_one_cron(app, make_cron):
    cron = make_cron(name="shown")

    result = run_cli(cli_env(app.extensions["qlshadow"]), "cron", "show", str(cron["id"]), "--json")

    assert json.loads(result.stdout) == cron


def test_cron_show_of_a_missing_cron_fails_in_one_line(app):
    result = run_cli(cli_env(app.extensions["qlshadow"]), "cron", "show", "424242", check=False)

    assert "424242" in _one_error_line(result)


def test_cron_rm_deletes_the_crons_and_their_instances(app, client, auth, make_cron):
    gone, kept = make_cron(name="gone"), make_cron(name="kept")
    client.put("/open/crons/status", headers=auth,
               json=fixture_body("callback_running", ids=[str(gone["id"])]))
    db.discard_connection()

    run_cli(cli_env(app.extensions["qlshadow"]), "cron", "rm", str(gone["id"]))

    assert [r["id"] for r in table_rows(Cron)] == [kept["id"]]
    assert table_rows(RunningInstance) == []


def test_cron_disable_and_enable_set_is_disabled(app, make_cron):
    cron, other = make_cron(name="a"), make_cron(name="b")
    env = cli_env(app.extensions["qlshadow"])

    run_cli(env, "cron", "disable", str(cron["id"]))
    disabled = {r["id"]: r["is_disabled"] for r in table_rows(Cron)}
    run_cli(env, "cron", "enable", str(cron["id"]))
    enabled = {r["id"]: r["is_disabled"] for r in table_rows(Cron)}

    assert disabled == {cron["id"]: 1, other["id"]: 0}
    assert enabled == {cron["id"]: 0, other["id"]: 0}


@pytest.mark.parametrize("args", [["cron", "show", "0"], ["cron", "rm", "x"], ["cron", "add", "* * * * *"],
                                  ["cron"], ["nothing"], ["app", "create"]],
                         ids=["zero-id", "text-id", "no-command", "no-subcommand", "unknown", "no-name"])
def test_bad_arguments_exit_non_zero_with_one_line(tmp_path, args):
    result = run_cli({"QL_DATA_DIR": str(tmp_path)}, *args, check=False)

    assert _one_error_line(result).startswith("qlshadow")
    assert not (tmp_path / "qlshadow.db").exists()


def test_serve_on_a_busy_port_fails_in_one_line_naming_the_address(tmp_path):
    import socket
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        env = {"QL_DATA_DIR": str(tmp_path), "QL_SCHEDULER": "node", "QL_PORT": str(port),
               "QL_CRONTAB_INSTALL": ""}

        result = run_cli(env, "serve", check=False)

    assert f"127.0.0.1:{port}" in _one_error_line(result)


# --- --help ---------------------------------------------------------------------------------

HELP = [[], ["serve"], ["db"], ["db", "init"], ["app"], ["app", "create"], ["token"],
        ["token", "system"], ["cron"], ["cron", "add"], ["cron", "list"], ["cron", "show"],
        ["cron", "rm"], ["cron", "run"], ["cron", "enable"], ["cron", "disable"], ["crontab"],
        ["runs"], ["log"], ["accept-failures"], ["failures"]]


@pytest.mark.parametrize("args", HELP, ids=lambda a: "-".join(a) or "qlshadow")
def test_help_on_every_command_exits_zero(args, capsys):
    with pytest.raises(SystemExit) as leaving:
        main([*args, "--help"])

    assert leaving.value.code == 0
    assert capsys.readouterr().out.startswith("usage: qlshadow")


def test_help_of_the_installed_command_exits_zero(tmp_path):
    result = run_cli({"QL_DATA_DIR": str(tmp_path)}, "--help")

    assert result.returncode == 0
    assert all(word in result.stdout for word in ("serve", "db", "app", "token", "cron"))
