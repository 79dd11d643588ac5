"""Our lines live in one marked block of the user's crontab; every other line is kept.

Each test installs into a real crontab: a BusyBox spool (`busybox crontab -c DIR`), or
Debian's crontab in a private mount namespace (as in test_cron_daemons), never the
machine's own. The crontab already holds what a router's root crontab holds: environment
lines, comments, jobs, lines that look like ours and another installation's block.
"""
from __future__ import annotations

import os
import shlex
import stat
import subprocess

import pytest

from qlshadow.service import cron_change, crons
from qlshadow.host import crontab
from qlshadow.storage import db
from qlshadow.storage.models import Cron
from helpers import cli_env, http, run_cli, table_rows
from shellenv import busybox_static

MARKER = "QL_EXECUTION_ORIGIN=scheduled_system"

USER_CRONTAB = (
    "SHELL=/bin/sh\n"
    'MAILTO=""\n'
    "# the router's own jobs\n"
    "0 4 * * * /sbin/reboot\n"
    "\n"
    "*/10 * * * * ID=7 QL_EXECUTION_ORIGIN=scheduled_system /usr/share/qlshadow/shell/task.sh "
    "'echo look-alike'\n"
    "# BEGIN qlshadow /srv/other\n"
    "* * * * * ID=1 QL_EXECUTION_ORIGIN=scheduled_system QL_DATA_DIR=/srv/other /x/task.sh true\n"
    "# END qlshadow /srv/other\n"
    "   # an indented comment, a tab\tand trailing spaces   \n"
    "30 2 * * 0 echo 'weekly, 中文' >/dev/null 2>&1\n"
).encode()


class Target:
    """One real crontab: the commands that read and install it, used by tests too."""

    def __init__(self, list_command: str, install: str):
        self.list, self.install = list_command, install

    def put(self, text: bytes, tmp) -> None:
        path = tmp / "seed.crontab"
        path.write_bytes(text)
        argv = [word.replace("{file}", str(path)) for word in shlex.split(self.install)]
        subprocess.run(argv, check=True, capture_output=True)

    def get(self) -> bytes:
        result = subprocess.run(shlex.split(self.list), capture_output=True)
        return result.stdout if result.returncode == 0 else b""


def forget_lock(target: Target) -> None:
    """Remove the lock file of a test's private crontab (no other process uses it)."""
    import types
    path = crontab.lock_path(types.SimpleNamespace(crontab_list=target.list,
                                                   crontab_install=target.install))
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


@pytest.fixture
def busybox_target(tmp_path):
    bb = busybox_static()
    spool = tmp_path / "spool"
    spool.mkdir()
    target = Target(f"{bb} crontab -c {spool} -l", f"{bb} crontab -c {spool} {{file}}")
    yield target
    forget_lock(target)


@pytest.fixture(params=["busybox", "debian"])
def target(request, tmp_path, busybox_target):
    if request.param == "busybox":
        yield busybox_target
        return
    from test_cron_daemons import Daemon
    daemon = Daemon("debian", tmp_path)
    try:
        yield Target(daemon.list, daemon.install)
    finally:
        daemon.stop()  # and its crontab's lock file


def use(app, make_settings, target: Target, **env):
    """Point the app at target's crontab in system mode; returns the settings."""
    settings = make_settings(**{"QL_SCHEDULER": "system", "QL_CRONTAB_INSTALL": target.install,
                                "QL_CRONTAB_LIST": target.list, **env})
    app.extensions["qlshadow"] = settings
    return settings


def block(settings) -> bytes:
    """Our block as it sits in the crontab, rendered from the database now."""
    begin, end = crontab.markers(settings)
    with db.database.connection_context():
        return f"{begin}\n{crontab.render(settings)}{end}\n".encode()


def post(client, auth, **body):
    full = {"name": "job", "command": "echo hi", "schedule": "*/5 * * * *", **body}
    response = client.post("/open/crons", json=full, headers=auth)
    assert response.status_code == 200, response.get_json()
    return response.get_json()["data"]


# --- kept byte for byte --------------------------------------------------------------------

def test_every_line_outside_our_block_is_kept_byte_for_byte_across_every_change(
        app, client, auth, make_settings, target, tmp_path):
    target.put(USER_CRONTAB, tmp_path)
    settings = use(app, make_settings, target)
    first = post(client, auth, name="first")
    assert target.get() == USER_CRONTAB + block(settings)
    second = post(client, auth, name="second", schedule="0 * * * *")
    changes = [("PUT", "/open/crons", {"id": first["id"], "command": "echo changed"}),
               ("PUT", "/open/crons/disable", [first["id"]]),
               ("PUT", "/open/crons/enable", [first["id"]]),
               ("DELETE", "/open/crons", [second["id"]])]
    for method, path, body in changes:
        assert client.open(path, method=method, json=body, headers=auth).status_code == 200
        installed = target.get()
        assert installed == USER_CRONTAB + block(settings), (method, path)
        active = 0 if path.endswith("/disable") else 1
        assert installed[len(USER_CRONTAB):].count(f" ID={first['id']} {MARKER} ".encode()) == active
    assert client.delete("/open/crons", json=[first["id"]], headers=auth).status_code == 200
    assert target.get() == USER_CRONTAB


def test_no_crontab_yet_reads_as_empty_and_the_block_is_all_that_is_installed(
        app, client, auth, make_settings, target):
    settings = use(app, make_settings, target)
    post(client, auth)
    assert target.get() == block(settings)
    assert client.get("/health").get_json()["data"]["crontab"].startswith("installed")


def test_the_block_is_replaced_where_it_stands_and_lines_after_it_stay_after_it(
        app, client, auth, make_settings, busybox_target, tmp_path):
    settings = use(app, make_settings, busybox_target)
    cron = post(client, auth)
    after = b"# added by hand after qlshadow's block\n15 3 * * * /usr/bin/backup\n"
    busybox_target.put(USER_CRONTAB + busybox_target.get() + after, tmp_path)
    assert client.put("/open/crons", json={"id": cron["id"], "schedule": "1 * * * *"},
                      headers=auth).status_code == 200
    assert busybox_target.get() == USER_CRONTAB + block(settings) + after
    assert b"\n1 * * * * ID=" in busybox_target.get()


def test_a_crontab_without_a_final_line_break_gets_one_before_our_block(
        app, client, auth, make_settings, busybox_target, tmp_path):
    busybox_target.put(b"0 4 * * * /sbin/reboot", tmp_path)
    settings = use(app, make_settings, busybox_target)
    post(client, auth)
    assert busybox_target.get() == b"0 4 * * * /sbin/reboot\n" + block(settings)


def test_two_installations_keep_each_others_blocks(
        app, client, auth, make_settings, busybox_target, tmp_path):
    busybox_target.put(USER_CRONTAB, tmp_path)
    mine = use(app, make_settings, busybox_target)
    post(client, auth)
    other = make_settings(QL_SCHEDULER="system", QL_CRONTAB_INSTALL=busybox_target.install,
                          QL_CRONTAB_LIST=busybox_target.list, QL_DATA_DIR=str(tmp_path / "other"),
                          QL_CRONTAB_FILE=str(tmp_path / "other" / "crontab.list"))
    with db.database.connection_context():
        crontab.sync(other)  # the same crons, rendered for the other data dir
    others = block(other)
    assert busybox_target.get() == USER_CRONTAB + block(mine) + others
    with db.database.connection_context(), db.write_transaction():
        Cron.update(is_disabled=1).execute()
    with db.database.connection_context():
        crontab.sync(mine)  # no active cron: my block goes, the other one stays as it was
    assert busybox_target.get() == USER_CRONTAB + others


def test_markers_that_do_not_pair_up_refuse_the_change(
        app, client, auth, make_settings, busybox_target, tmp_path):
    settings = use(app, make_settings, busybox_target)
    begin, _ = crontab.markers(settings)
    broken = USER_CRONTAB + f"{begin}\n* * * * * echo mine\n".encode()
    busybox_target.put(broken, tmp_path)
    response = client.post("/open/crons", json={"name": "j", "command": "true",
                                                "schedule": "* * * * *"}, headers=auth)
    assert response.status_code == 503
    assert "crontab -e" in response.get_json()["message"]
    assert busybox_target.get() == broken
    assert table_rows(Cron) == []


def test_an_upgrade_takes_over_the_whole_crontab_an_earlier_version_installed(
        app, client, auth, make_settings, busybox_target, tmp_path):
    settings = use(app, make_settings, busybox_target, QL_CRONTAB_INSTALL="", QL_CRONTAB_LIST="")
    cron = post(client, auth)
    with db.database.connection_context():
        # What the earlier version installed whole: it had no tick line.
        old = b"".join(text for text in crontab.render(settings).encode().splitlines(True)
                       if text.rstrip() != crontab.NO_CHANNEL.encode())
    added = b"0 4 * * * /sbin/reboot\n"
    busybox_target.put(old + added, tmp_path)
    settings = use(app, make_settings, busybox_target)
    assert client.put("/open/crons", json={"id": cron["id"], "name": "renamed"},
                      headers=auth).status_code == 200
    assert busybox_target.get() == added + block(settings)


# --- removal -------------------------------------------------------------------------------

def test_qlshadow_crontab_remove_takes_out_only_our_block(
        app, client, auth, make_settings, target, tmp_path):
    target.put(USER_CRONTAB, tmp_path)
    settings = use(app, make_settings, target)
    post(client, auth)
    assert target.get() != USER_CRONTAB
    env = dict(cli_env(settings), QL_SCHEDULER="system", QL_CRONTAB_INSTALL=target.install,
               QL_CRONTAB_LIST=target.list)
    result = run_cli(env, "crontab", "--remove")
    assert result.stdout.startswith("removed qlshadow's block with ")
    assert target.get() == USER_CRONTAB
    assert not os.path.exists(settings.crontab_file)
    again = run_cli(env, "crontab", "--remove")
    assert again.stdout.startswith("no qlshadow block in the crontab")
    assert target.get() == USER_CRONTAB


# --- reading before writing ----------------------------------------------------------------

def test_a_crontab_that_cannot_be_read_is_never_installed_over(
        app, client, auth, make_settings, busybox_target, tmp_path):
    busybox_target.put(USER_CRONTAB, tmp_path)
    bb = busybox_static()
    unreadable = Target(f"{bb} crontab -c {tmp_path / 'missing'} -l", busybox_target.install)
    use(app, make_settings, unreadable)
    try:
        response = client.post("/open/crons", json={"name": "j", "command": "true",
                                                    "schedule": "* * * * *"}, headers=auth)
    finally:
        forget_lock(unreadable)
    assert response.status_code == 503
    assert response.get_json()["message"].startswith(
        "The cron change was not made: reading the crontab failed: ")
    assert busybox_target.get() == USER_CRONTAB
    assert table_rows(Cron) == []
    health = client.get("/health")
    assert health.status_code == 503
    assert health.get_json()["data"]["crontab"].startswith("not installed: reading the crontab failed")


# --- a failed install changes nothing --------------------------------------------------------

@pytest.mark.parametrize("change", ["create", "update", "delete", "enable", "disable"])
def test_a_change_whose_install_fails_is_503_and_changes_nothing(
        app, client, auth, make_settings, busybox_target, tmp_path, change):
    busybox_target.put(USER_CRONTAB, tmp_path)
    settings = use(app, make_settings, busybox_target)
    kept = post(client, auth, name="kept")
    off = post(client, auth, name="off")
    assert client.put("/open/crons/disable", json=[off["id"]], headers=auth).status_code == 200
    rows, installed = table_rows(Cron), busybox_target.get()
    with open(settings.crontab_file, "rb") as fh:
        block_file = fh.read()
    use(app, make_settings, busybox_target, QL_CRONTAB_INSTALL="false {file}")
    method, path, body = {
        "create": ("POST", "/open/crons", {"name": "new", "command": "true", "schedule": "* * * * *"}),
        "update": ("PUT", "/open/crons", {"id": kept["id"], "command": "echo changed"}),
        "delete": ("DELETE", "/open/crons", [kept["id"]]),
        "enable": ("PUT", "/open/crons/enable", [off["id"]]),
        "disable": ("PUT", "/open/crons/disable", [kept["id"]]),
    }[change]
    response = client.open(path, method=method, json=body, headers=auth)
    assert response.status_code == 503
    assert response.get_json()["message"].startswith(
        "The cron change was not made: installing the crontab failed: false ")
    assert table_rows(Cron) == rows
    assert busybox_target.get() == installed
    with open(settings.crontab_file, "rb") as fh:
        assert fh.read() == block_file
    assert client.get("/health").status_code == 503
    use(app, make_settings, busybox_target)
    post(client, auth, name="later")
    assert client.get("/health").status_code == 200


def test_a_refused_change_leaves_the_deleted_crons_line_and_the_database_in_step(
        app, client, auth, make_settings, busybox_target, tmp_path):
    settings = use(app, make_settings, busybox_target)
    cron = post(client, auth)
    use(app, make_settings, busybox_target, QL_CRONTAB_INSTALL="false {file}")
    assert client.delete("/open/crons", json=[cron["id"]], headers=auth).status_code == 503
    # Both still hold the cron: crond runs it and its callbacks still find it.
    assert client.get(f"/open/crons/{cron['id']}", headers=auth).status_code == 200
    assert f" ID={cron['id']} {MARKER} ".encode() in busybox_target.get()
    assert busybox_target.get() == block(settings)


def test_a_commit_that_fails_after_the_install_puts_the_crontab_back(
        app, client, auth, make_settings, busybox_target, tmp_path):
    busybox_target.put(USER_CRONTAB, tmp_path)
    settings = use(app, make_settings, busybox_target)
    cron = post(client, auth)
    rows, installed = table_rows(Cron), busybox_target.get()
    seen = []

    def disable_then_fail(planned):
        # The dry run disables the cron (its block goes); the real pass fails to commit.
        crons.set_disabled([cron["id"]], True)
        seen.append(busybox_target.get())
        if planned is not None:
            raise RuntimeError("the commit failed")
        return 1

    with db.database.connection_context(), pytest.raises(RuntimeError):
        cron_change.change(settings, disable_then_fail)
    assert seen == [installed, USER_CRONTAB]  # the install happened between the passes
    assert busybox_target.get() == installed
    assert table_rows(Cron) == rows


# --- one install setting for the server and the CLI ---------------------------------------

def _fake_crontab(tmp_path) -> tuple:
    """A PATH folder whose `crontab` only notes that it ran: the user's own crontab."""
    folder = tmp_path / "fakebin"
    folder.mkdir()
    called = tmp_path / "fake-crontab-called"
    script = folder / "crontab"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {called}\nexit 0\n")
    script.chmod(0o755)
    return str(folder), called


def test_a_cli_command_given_only_the_data_dir_installs_where_the_server_does(
        live_server, make_settings, busybox_target, tmp_path):
    busybox_target.put(USER_CRONTAB, tmp_path)
    server = live_server(QL_SCHEDULER="system", QL_CRONTAB_INSTALL=busybox_target.install,
                         QL_CRONTAB_LIST=busybox_target.list)
    status, answer = http("POST", server.url + "/open/crons", headers=server.headers,
                          body={"name": "j", "command": "true", "schedule": "*/5 * * * *"})
    assert status == 200, answer
    cron_id = answer["data"]["id"]
    assert f" ID={cron_id} {MARKER} ".encode() in busybox_target.get()
    data_dir = str(tmp_path / "data")
    record = os.path.join(data_dir, crontab.RECORD)
    assert stat.S_IMODE(os.stat(record).st_mode) == 0o600
    runner_env = (tmp_path / "data" / "runner.env").read_text()
    fakebin, called = _fake_crontab(tmp_path)
    env = {"QL_DATA_DIR": data_dir, "QL_DB_URL": make_settings().db_url,
           "PATH": fakebin + os.pathsep + os.environ["PATH"]}
    result = run_cli(env, "cron", "disable", str(cron_id))
    said = result.stderr.strip().splitlines()
    assert len(said) == 1 and busybox_target.install in said[0], result.stderr
    assert not called.exists()
    assert busybox_target.get() == USER_CRONTAB  # its only active line is gone: no block
    assert (tmp_path / "data" / "runner.env").read_text() == runner_env  # the server's URL
    status, health = http("GET", server.url + "/health")
    assert status == 200 and health["data"]["crontab"].startswith("installed")


def test_a_cli_install_with_another_command_than_the_servers_is_refused_naming_both(
        live_server, make_settings, busybox_target, tmp_path):
    server = live_server(QL_SCHEDULER="system", QL_CRONTAB_INSTALL=busybox_target.install,
                         QL_CRONTAB_LIST=busybox_target.list)
    status, answer = http("POST", server.url + "/open/crons", headers=server.headers,
                          body={"name": "j", "command": "true", "schedule": "*/5 * * * *"})
    assert status == 200, answer
    installed = busybox_target.get()
    env = {"QL_DATA_DIR": str(tmp_path / "data"), "QL_DB_URL": make_settings().db_url,
           "QL_CRONTAB_INSTALL": "false {file}", "QL_CRONTAB_LIST": ""}
    result = run_cli(env, "cron", "add", "*/5 * * * *", "echo more", check=False)
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("qlshadow: the cron change was not made: this command has "
                           "QL_CRONTAB_INSTALL='false {file}' (from the environment)")
    assert f"installs with QL_CRONTAB_INSTALL={busybox_target.install!r}" in line
    assert busybox_target.get() == installed
    status, health = http("GET", server.url + "/health")
    assert status == 200 and health["data"]["crontab"].startswith("installed")
    status, listing = http("GET", f"{server.url}/open/crons", headers=server.headers)
    assert listing["data"]["total"] == 1


# --- the list setting ------------------------------------------------------------------------

@pytest.mark.parametrize("install, listing", [
    ("crontab {file}", "crontab -l"),
    ("/bin/busybox crontab -c /etc/crontabs {file}", "/bin/busybox crontab -c /etc/crontabs -l"),
    ("nsenter -t 1 -m crontab -u bob {file}", "nsenter -t 1 -m crontab -u bob -l"),
    ("", ""),
])
def test_a_crontab_install_command_is_read_with_the_same_words_and_l(install, listing):
    from qlshadow import config
    settings = config.load(environ={"QL_CRONTAB_INSTALL": install})
    assert settings.crontab_list == listing


def test_any_other_install_command_needs_its_list_command():
    from qlshadow import config
    with pytest.raises(config.ConfigError, match="needs QL_CRONTAB_LIST"):
        config.load(environ={"QL_CRONTAB_INSTALL": "cp {file} /etc/crontabs/root"})
    settings = config.load(environ={"QL_CRONTAB_INSTALL": "cp {file} /etc/crontabs/root",
                                    "QL_CRONTAB_LIST": "cat /etc/crontabs/root"})
    assert settings.crontab_list == "cat /etc/crontabs/root"


def test_a_cli_command_run_as_another_user_than_the_server_installs_nothing(
        app, make_settings, busybox_target, tmp_path):
    import json
    busybox_target.put(USER_CRONTAB, tmp_path)
    settings = use(app, make_settings, busybox_target)
    crontab.record_settings(settings)
    record_path = os.path.join(settings.data_dir, crontab.RECORD)
    with open(record_path, encoding="utf-8") as fh:
        record = json.load(fh)
    with open(record_path, "w", encoding="utf-8") as fh:
        json.dump(dict(record, uid=os.geteuid() + 1), fh)  # as if the server ran as another user
    env = {"QL_DATA_DIR": settings.data_dir, "QL_DB_URL": settings.db_url}
    result = run_cli(env, "cron", "add", "* * * * *", "true", check=False)
    assert result.returncode == 1
    assert "run it as the server's user" in result.stderr
    assert busybox_target.get() == USER_CRONTAB
    assert table_rows(Cron) == []
    assert not os.path.exists(crontab.state_file(settings))


# --- Debian's crontab and a long file name ---------------------------------------------------

@pytest.fixture
def debian_daemon(tmp_path):
    from test_cron_daemons import Daemon
    daemon = Daemon("debian", tmp_path)
    yield daemon
    daemon.stop()


def test_a_file_name_too_long_for_debians_crontab_is_refused_with_the_way_out(
        app, client, auth, make_settings, debian_daemon, tmp_path):
    long_dir = tmp_path / ("d" * 90)
    long_dir.mkdir()
    enter = " ".join(debian_daemon.enter)
    by_name = Target(f"{enter} crontab -l", f"{enter} crontab {{file}}")
    use(app, make_settings, by_name, QL_CRONTAB_FILE=str(long_dir / "crontab.list"))
    response = client.post("/open/crons", json={"name": "job", "command": "echo hi",
                                                "schedule": "*/5 * * * *"}, headers=auth)
    message = response.get_json()["message"]
    assert response.status_code == 503 and "at most 99 bytes of a file name" in message, message
    assert by_name.get() == b""
    # The template the message gives installs the same file through stdin.
    through_stdin = Target(by_name.list, debian_daemon.install)
    settings = use(app, make_settings, through_stdin, QL_CRONTAB_FILE=str(long_dir / "crontab.list"))
    post(client, auth)
    assert through_stdin.get() == block(settings)
