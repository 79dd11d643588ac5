"""Whether a cron daemon runs (a scan of /proc), and on OpenWrt crond enabled and started
once after our block is installed (app/host/crond.py)."""
from __future__ import annotations

import os
import subprocess

import pytest

from qlshadow.host import crond
from helpers import cli_env, run_cli, stop_process
from shellenv import busybox_static, wait_for


def fake_proc(root, **processes) -> str:
    """A /proc with one directory per pid: {pid: (comm, argv)}."""
    proc = root / "proc"
    proc.mkdir()
    (proc / "self").mkdir()
    for pid, (comm, argv) in processes.items():
        one = proc / pid.lstrip("p")
        one.mkdir()
        (one / "comm").write_text(comm + "\n")
        (one / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    return str(proc)


def openwrt_root(tmp_path) -> tuple:
    """An OpenWrt tree whose cron init script records each action it is given."""
    root = tmp_path / "root"
    (root / "etc" / "init.d").mkdir(parents=True)
    (root / "etc" / "openwrt_release").write_text("DISTRIB_ID='OpenWrt'\n")
    calls = tmp_path / "init-calls"
    script = root / "etc" / "init.d" / "cron"
    script.write_text(f'#!/bin/sh\necho "$1" >> "{calls}"\n')
    script.chmod(0o755)
    return str(root), calls


@pytest.fixture
def fresh(monkeypatch):
    """Forget which init scripts this process already ran."""
    monkeypatch.setattr(crond, "_started", set())


def test_a_crond_cron_or_busybox_crond_process_counts_as_running(tmp_path):
    assert crond.crond_running(fake_proc(tmp_path, p1=("crond", ["/usr/sbin/crond", "-f"])))
    (tmp_path / "b").mkdir()
    assert crond.crond_running(fake_proc(tmp_path / "b", p7=("cron", ["/usr/sbin/cron"])))
    (tmp_path / "c").mkdir()
    assert crond.crond_running(fake_proc(tmp_path / "c",
                                         p9=("busybox", ["busybox", "crond", "-f"])))


def test_no_cron_daemon_among_the_processes_is_not_running(tmp_path):
    proc = fake_proc(tmp_path, p1=("init", ["/sbin/init"]), p2=("busybox", ["busybox", "sh"]),
                     p3=("crontab", ["crontab", "-l"]))
    assert not crond.crond_running(proc)
    assert crond.crontab_words("installed", proc) == "installed, crond not running"
    assert crond.crontab_words("none yet", proc) == "none yet"


def _comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as fh:
        return fh.read().strip()


def test_a_real_busybox_crond_is_found_in_the_real_proc(tmp_path):
    link = tmp_path / "crond"
    link.symlink_to(busybox_static())  # run as "crond", as OpenWrt's /usr/sbin/crond is
    spool = tmp_path / "spool"
    spool.mkdir()
    process = subprocess.Popen([str(link), "-f", "-c", str(spool)], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: _comm(process.pid) == "crond", 10)  # once it has exec'd
        assert crond.crond_running()
    finally:
        stop_process(process)


def test_on_openwrt_crond_is_enabled_and_started_once_when_it_does_not_run(tmp_path, fresh):
    root, calls = openwrt_root(tmp_path)
    proc = fake_proc(tmp_path, p1=("init", ["/sbin/procd"]))
    assert crond.ensure_running(root, proc) == "crond enabled and started"
    assert calls.read_text() == "enable\nstart\n"
    assert crond.ensure_running(root, proc) is None  # once per process
    assert calls.read_text() == "enable\nstart\n"


def test_on_openwrt_a_running_crond_is_left_alone(tmp_path, fresh):
    root, calls = openwrt_root(tmp_path)
    assert crond.ensure_running(root, fake_proc(tmp_path, p5=("crond", ["crond"]))) is None
    assert not calls.exists()


def test_elsewhere_nothing_is_started(tmp_path, fresh):
    root, calls = openwrt_root(tmp_path)
    os.unlink(os.path.join(root, "etc/openwrt_release"))
    assert crond.ensure_running(root, fake_proc(tmp_path)) is None
    assert not calls.exists()


def test_a_failing_init_script_is_said_and_not_retried(tmp_path, fresh):
    root, calls = openwrt_root(tmp_path)
    with open(os.path.join(root, "etc/init.d/cron"), "a") as fh:
        fh.write("exit 1\n")
    proc = fake_proc(tmp_path)
    assert crond.ensure_running(root, proc) == \
        f"crond not started: {root}/etc/init.d/cron enable exited 1"
    assert crond.ensure_running(root, proc) is None
    assert calls.read_text() == "enable\n"


def _system(make_settings, tmp_path, app):
    target = tmp_path / "installed.crontab"
    settings = make_settings(QL_SCHEDULER="system", QL_CRONTAB_LIST="",
                             QL_CRONTAB_INSTALL=f"cp {{file}} {target}")
    app.extensions["qlshadow"] = settings
    return settings


def test_an_install_on_openwrt_starts_crond_and_health_says_when_it_does_not_run(
        app, client, auth, make_settings, tmp_path, monkeypatch, fresh):
    root, calls = openwrt_root(tmp_path)
    monkeypatch.setattr(crond, "ROOT", root)
    monkeypatch.setattr(crond, "PROC", fake_proc(tmp_path, p1=("init", ["/sbin/procd"])))
    _system(make_settings, tmp_path, app)
    assert client.get("/health").get_json()["data"]["crontab"] == "none yet"
    assert client.post("/open/crons", json={"name": "a", "command": "true",
                                            "schedule": "* * * * *"},
                       headers=auth).status_code == 200
    assert calls.read_text() == "enable\nstart\n"
    # The fake init script starts nothing: crond still does not run, and /health says so.
    health = client.get("/health")
    assert health.status_code == 200
    assert health.get_json()["data"]["crontab"] == "installed, crond not running"
    monkeypatch.setattr(crond, "PROC", fake_proc(tmp_path / "data", p4=("crond", ["crond"])))
    assert client.get("/health").get_json()["data"]["crontab"] == "installed"


def test_qlshadow_status_says_when_crond_does_not_run(app, client, auth, make_settings,
                                                       tmp_path, monkeypatch):
    settings = _system(make_settings, tmp_path, app)
    monkeypatch.setattr(crond, "ROOT", str(tmp_path))  # not OpenWrt: nothing is started
    assert client.post("/open/crons", json={"name": "a", "command": "true",
                                            "schedule": "* * * * *"},
                       headers=auth).status_code == 200
    env = dict(cli_env(settings), QL_SCHEDULER="system", QL_CRONTAB_LIST="",
               QL_CRONTAB_INSTALL=settings.crontab_install)
    result = run_cli(env, "status")
    said = "qlshadow: crontab installed, crond not running: no firing of it will start"
    assert (said in result.stderr) == (not crond.crond_running())
    assert result.stdout.split()[0] == "cron"


def test_qlshadow_version_prints_the_version():
    from qlshadow import __version__
    result = run_cli({}, "--version")
    assert result.stdout == f"qlshadow {__version__}\n"


@pytest.fixture
def installed_without_crond(app, client, auth, make_settings, tmp_path, monkeypatch):
    """A crontab installed on a host (not OpenWrt: nothing is started) where no crond runs."""
    _system(make_settings, tmp_path, app)
    monkeypatch.setattr(crond, "ROOT", str(tmp_path))
    monkeypatch.setattr(crond, "PROC", fake_proc(tmp_path, p1=("init", ["/sbin/init"])))
    assert client.post("/open/crons", json={"name": "a", "command": "true",
                                            "schedule": "* * * * *"},
                       headers=auth).status_code == 200


def test_the_status_pages_health_says_crond_does_not_run(client, token, installed_without_crond):
    assert client.post("/page/login", data={"token": token}).status_code in (302, 303)
    page = client.get("/page/health").get_data(as_text=True)
    assert "<dt>Crontab</dt>" in page and ">installed, crond not running</span>" in page


def test_metrics_say_whether_crond_runs_beside_the_install_state(
        client, settings, tmp_path, monkeypatch, installed_without_crond):
    from test_metrics import metrics_token
    value = metrics_token(settings)

    def gauges() -> dict:
        text = client.get("/metrics", headers={"Authorization": f"Bearer {value}"}).get_data(
            as_text=True)
        return dict(line.split() for line in text.splitlines()
                    if line.startswith(("qlshadow_crontab_installed ", "qlshadow_crond_running ")))

    assert gauges() == {"qlshadow_crontab_installed": "1", "qlshadow_crond_running": "0"}
    monkeypatch.setattr(crond, "PROC", fake_proc(tmp_path / "data", p4=("crond", ["crond"])))
    assert gauges()["qlshadow_crond_running"] == "1"


def test_the_kind_of_cron_daemon_tells_busybox_crond_from_daemons_that_overlap_runs(tmp_path):
    def kind(name, **processes):
        (tmp_path / name).mkdir()
        return crond.daemon_kind(fake_proc(tmp_path / name, **processes), now=0)

    assert kind("applet", p9=("busybox", ["busybox", "crond", "-f"])) == "busybox"
    linked = tmp_path / "linked"
    linked.mkdir()
    proc = fake_proc(linked, p4=("crond", ["/usr/sbin/crond", "-f"]))  # OpenWrt: a link
    os.symlink("/bin/busybox", os.path.join(proc, "4", "exe"))
    assert crond.daemon_kind(proc, now=0) == "busybox"
    debian = tmp_path / "debian"
    debian.mkdir()
    proc = fake_proc(debian, p7=("cron", ["/usr/sbin/cron", "-f"]))
    os.symlink("/usr/sbin/cron", os.path.join(proc, "7", "exe"))
    assert crond.daemon_kind(proc, now=0) == "overlapping"
    cronie = tmp_path / "cronie"
    cronie.mkdir()
    proc = fake_proc(cronie, p8=("crond", ["/usr/sbin/crond", "-n"]))
    os.symlink("/usr/sbin/crond", os.path.join(proc, "8", "exe"))
    assert crond.daemon_kind(proc, now=0) == "overlapping"
    both = tmp_path / "both"
    both.mkdir()
    proc = fake_proc(both, p1=("busybox", ["busybox", "crond"]), p2=("cron", ["cron"]))
    os.symlink("/usr/sbin/cron", os.path.join(proc, "2", "exe"))
    assert crond.daemon_kind(proc, now=0) == "overlapping"
    assert kind("none", p1=("init", ["/sbin/init"])) is None
    # Kept a few minutes per /proc: a second look at the same tree within them reads nothing.
    assert crond.daemon_kind(str(tmp_path / "none" / "proc"), now=60) is None


def test_a_crond_whose_program_cannot_be_read_is_told_by_the_path_it_was_started_as(tmp_path):
    # Another user's process: no exe link to read (the fake has none), only its argv.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "busybox").write_text("")
    os.symlink(bin_dir / "busybox", bin_dir / "crond")
    proc = fake_proc(tmp_path, p3=("crond", [str(bin_dir / "crond"), "-f"]))
    assert crond.daemon_kind(proc, now=0) == "busybox"
    (tmp_path / "n").mkdir()
    unknown = fake_proc(tmp_path / "n", p3=("crond", ["crond", "-f"]))
    assert crond.daemon_kind(unknown, now=0) is None
