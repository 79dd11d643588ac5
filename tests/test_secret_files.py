"""Every secret file in the data dir is 0600 after a command that writes or reads it, and
`serve` makes one that is not 0600 again at start-up with one warning line naming it
(app/files.py make_private; both databases)."""
from __future__ import annotations

import os
import stat

import pytest

from helpers import STARTUP, Serve, clean_env, cli_env, http, run_cli


SECRETS = ("token.json", "runner-token.json", "runner.env", "runner.conf", "notify.conf",
           "page.key", "crontab.list", "crontab-settings.json")


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _loosen(*paths: str) -> None:
    for path in paths:
        os.chmod(path, 0o644)


@pytest.mark.parametrize("command, name", [(("token", "system"), "token.json"),
                                           (("token", "runner"), "runner-token.json")])
def test_a_token_command_makes_its_loosened_file_0600_again_and_keeps_the_token(
        settings, command, name):
    env = cli_env(settings)
    run_cli(env, *command)
    path = os.path.join(settings.data_dir, name)
    with open(path) as fh:
        before = fh.read()
    _loosen(path)
    run_cli(env, *command)
    with open(path) as fh:
        assert fh.read() == before  # the same token, reused
    assert _mode(path) == 0o600


def test_the_runner_token_command_task_sh_runs_makes_runner_conf_0600_again(settings):
    env = cli_env(settings)
    run_cli(env, "token", "system")
    os.makedirs(settings.data_dir, exist_ok=True)
    conf = os.path.join(settings.data_dir, "runner.conf")
    with open(conf, "w") as fh:
        fh.write(f'QL_DB_URL="{settings.db_url}"\nQL_DATA_DIR="{settings.data_dir}"\n')
    _loosen(conf)
    # As shell/common.sh calls it: the config file named by QL_CONFIG.
    run_cli({"QL_CONFIG": conf, "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": ""},
            "token", "runner")
    assert _mode(conf) == 0o600


def test_a_config_file_outside_the_data_dir_is_left_as_it_is(settings, tmp_path):
    conf = tmp_path / "qlshadow.conf"
    conf.write_text(f'QL_DB_URL="{settings.db_url}"\nQL_DATA_DIR="{settings.data_dir}"\n')
    _loosen(str(conf))
    run_cli({"QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": ""}, "--config", str(conf),
            "token", "system")
    assert _mode(str(conf)) == 0o644  # the operator's file, not ours to change


def _serve_once(env: dict, log_path: str) -> str:
    """Start `qlshadow serve` (no token command first), wait until it serves, stop it by its
    PID; returns its output."""
    with Serve(env=clean_env({"QL_HOST": "127.0.0.1", "QL_PORT": "0", **env}), log_path=log_path) as server:
        pass
    return server.output()


def test_serve_makes_every_loosened_secret_file_0600_with_one_warning_line_each(
        live_server, settings, tmp_path):
    server = live_server()
    status, _ = http("POST", f"{server.url}/open/crons", {"name": "a", "command": "true",
                     "schedule": "* * * * *"}, server.headers)
    assert status == 200
    form = f"token={server.token}".encode()
    http("POST", f"{server.url}/page/login", form,
         {"Content-Type": "application/x-www-form-urlencoded"})  # writes page.key
    server.stop()
    secrets = [os.path.abspath(os.path.join(settings.data_dir, name)) for name in SECRETS]
    _loosen(*secrets)
    os.chmod(settings.data_dir, 0o755)

    output = _serve_once(cli_env(settings), str(tmp_path / "again.log"))
    assert STARTUP.search(output.encode()), output
    warnings = [line for line in output.splitlines() if line.startswith("qlshadow: warning:")]
    assert sorted(warnings) == sorted(
        f"qlshadow: warning: {path} was mode 0644, readable by other users; made it 0600"
        for path in secrets), output
    assert {path: _mode(path) for path in secrets} == {path: 0o600 for path in secrets}
    assert _mode(settings.data_dir) == 0o700

    # Once private, the next start says nothing.
    quiet = _serve_once(cli_env(settings), str(tmp_path / "quiet.log"))
    assert "warning" not in quiet, quiet


def test_a_sign_in_makes_a_loosened_page_key_0600_again(app, client, token):
    assert client.post("/page/login", data={"token": token}).status_code == 303
    path = os.path.join(app.extensions["qlshadow"].data_dir, "page.key")
    _loosen(path)
    app.extensions.pop("qlshadow.page")  # as a restarted server, which reads the key again
    assert client.post("/page/login", data={"token": token}).status_code == 303
    assert _mode(path) == 0o600
