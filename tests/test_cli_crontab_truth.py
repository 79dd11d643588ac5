"""One crontab truth (issue 35): a CLI command given other install settings than the server
running on the same data dir recorded is refused in one line naming both, with nothing
changed; /health and the block file say what is really installed. A real `serve`, real
BusyBox crontab spools, the CLI as child processes (both databases)."""
from __future__ import annotations

import os

from qlshadow.host import crontab
from helpers import http, run_cli
from test_crontab_block import MARKER, USER_CRONTAB, busybox_target  # noqa: F401


def _server_with_a_cron(live_server, busybox_target, tmp_path):  # noqa: F811
    busybox_target.put(USER_CRONTAB, tmp_path)
    server = live_server(QL_SCHEDULER="system", QL_CRONTAB_INSTALL=busybox_target.install,
                         QL_CRONTAB_LIST=busybox_target.list)
    status, answer = http("POST", server.url + "/open/crons", headers=server.headers,
                          body={"name": "backup", "command": "true", "schedule": "*/5 * * * *"})
    assert status == 200, answer
    return server, answer["data"]["id"]


def _health(server) -> tuple:
    """(status, crontab words), the words without a ", crond not running" (none runs here)."""
    status, answer = http("GET", server.url + "/health")
    return status, answer["data"]["crontab"].split(", crond")[0]


def test_a_cli_change_with_an_empty_install_command_beside_a_server_is_refused(
        live_server, make_settings, busybox_target, tmp_path):  # noqa: F811
    server, cron_id = _server_with_a_cron(live_server, busybox_target, tmp_path)
    installed = busybox_target.get()
    block_file = tmp_path / "data" / "crontab.list"
    block = block_file.read_text()
    assert f" ID={cron_id} {MARKER} ".encode() in installed
    # The README's shell: QL_CRONTAB_INSTALL exported empty ("install nothing").
    env = {"QL_DATA_DIR": str(tmp_path / "data"), "QL_DB_URL": make_settings().db_url,
           "QL_CRONTAB_INSTALL": ""}

    for args in (("cron", "add", "* * * * *", "echo new"), ("cron", "rm", "backup"),
                 ("cron", "disable", str(cron_id)), ("crontab",)):
        result = run_cli(env, *args, check=False)
        assert result.returncode == 1, args
        (line,) = result.stderr.splitlines()
        assert "this command has QL_CRONTAB_INSTALL='' (from the environment)" in line, line
        assert f"installs with QL_CRONTAB_INSTALL={busybox_target.install!r}" in line, line
        assert busybox_target.get() == installed and block_file.read_text() == block

    status, answer = http("GET", f"{server.url}/open/crons", headers=server.headers)
    assert [c["id"] for c in answer["data"]["data"]] == [cron_id]
    assert _health(server) == (200, "installed")

    # Without the shell's setting the CLI installs exactly as the server does.
    del env["QL_CRONTAB_INSTALL"]
    result = run_cli(env, "cron", "rm", "backup")
    assert result.stdout == f"deleted cron {cron_id} (backup)\n"
    assert busybox_target.install in result.stderr
    assert busybox_target.get() == USER_CRONTAB
    assert _health(server) == (200, "installed")


def test_a_block_file_that_was_never_installed_is_not_reported_installed(
        live_server, make_settings, busybox_target, tmp_path):  # noqa: F811
    server, cron_id = _server_with_a_cron(live_server, busybox_target, tmp_path)
    assert _health(server) == (200, "installed")
    block_file = tmp_path / "data" / "crontab.list"
    # What an older CLI with an empty install command left: a block crond never got.
    block_file.write_text(block_file.read_text().replace("*/5 * * * *", "*/7 * * * *"))

    status, said = _health(server)
    assert status == 503 and said.startswith(
        f"not installed: {block_file} holds a block that `{busybox_target.install}` did not "
        "install"), said

    env = {"QL_DATA_DIR": str(tmp_path / "data"), "QL_DB_URL": make_settings().db_url}
    run_cli(env, "crontab")  # installs the database's block, as the server would
    assert _health(server) == (200, "installed")
    assert b"*/5 * * * *" in busybox_target.get() and "*/7" not in block_file.read_text()


def test_an_empty_install_command_forgets_the_last_install(make_settings, app, tmp_path):
    settings = make_settings(QL_SCHEDULER="system", QL_CRONTAB_INSTALL="")
    crontab.put(settings, "# block\n", 0)
    assert not os.path.exists(crontab.installed_file(settings))
    assert crontab.install_state(settings).startswith("written, not installed")
