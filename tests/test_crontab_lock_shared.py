"""The crontab lock holds across data dirs and processes (app/host/crontab/lock.py): a cron
change of one data dir waits while any other installation holds the lock of the crontab
they share, and changes of several data dirs made at once each install exactly once,
each composed from the crontab the one before it installed.

The crontab is a real BusyBox spool (`busybox crontab -c DIR`), read through a command that
takes half a second after listing, so that the read-edit-install of each change lasts long
enough for the changes of other data dirs to start inside it. Both databases.
"""
from __future__ import annotations

import fcntl
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from qlshadow.host import crontab
from helpers import ROOT, clean_env
from test_crontab_block import USER_CRONTAB, busybox_target  # noqa: F401  (a fixture)
from test_crontab_shared import MARKER, DataDir, database_url, lock_files  # noqa: F401

CHANGES = 4  # per data dir


def _slow(data: DataDir, spool: str, count) -> None:
    """Point data at the spool through a slow read and an install that counts itself."""
    from shellenv import busybox_static
    bb = shlex.quote(busybox_static())
    data.env["QL_CRONTAB_LIST"] = shlex.join(["sh", "-c", (
        f"{bb} crontab -c {shlex.quote(spool)} -l; rc=$?; sleep 0.5; exit $rc")])
    data.env["QL_CRONTAB_INSTALL"] = shlex.join(["sh", "-c", (
        f'echo >> {shlex.quote(str(count))}; exec {bb} crontab -c {shlex.quote(spool)} "$0"'
    )]) + " {file}"


@pytest.fixture
def dirs(busybox_target, database_url, lock_files, tmp_path):  # noqa: F811
    """Three data dirs sharing one slow crontab, and the file counting installs."""
    busybox_target.put(USER_CRONTAB, tmp_path)
    count = tmp_path / "installs"
    made = []
    for name in ("d1", "d2", "d3"):
        data = DataDir(str(tmp_path / name), database_url(name), busybox_target, lock_files)
        _slow(data, str(tmp_path / "spool"), count)
        lock_files(crontab.lock_path(data.settings()))
        made.append(data)
    assert len({crontab.lock_path(data.settings()) for data in made}) == 1
    return made, count


def test_changes_of_three_data_dirs_at_once_install_once_each_and_lose_nothing(
        busybox_target, dirs):  # noqa: F811
    made, count = dirs

    def changes(data: DataDir) -> list:
        name = os.path.basename(data.path)
        return [data.cli("cron", "add", "*/5 * * * *", f"echo {name}-{n}", check=False)
                for n in range(CHANGES)]

    with ThreadPoolExecutor(max_workers=len(made)) as pool:
        results = [r for done in pool.map(changes, made) for r in done]
    assert [r.stderr for r in results if r.returncode != 0] == []
    # One install per change: none was composed from a crontab another data dir replaced.
    assert count.read_text() == "\n" * (CHANGES * len(made))
    installed = busybox_target.get()
    rest = installed
    for data in made:
        block = data.block()
        assert installed.count(block) == 1, (data.path, installed.decode())
        assert block.count(f" {MARKER} ".encode()) == CHANGES
        rest = rest.replace(block, b"")
    assert rest == USER_CRONTAB


def test_a_change_waits_while_another_data_dir_holds_the_crontab_lock(busybox_target, dirs):  # noqa: F811
    (first, second, _), count = dirs
    fd = os.open(crontab.lock_path(first.settings()), os.O_RDONLY | os.O_CREAT, 0o600)
    waiting = None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as d1's change holds it while it installs
        waiting = subprocess.Popen(
            [sys.executable, "-m", "qlshadow.cli", "cron", "add", "*/5 * * * *", "echo d2"],
            env=clean_env(second.env), cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(4)  # its start (a second or two here) and more
            assert waiting.poll() is None, waiting.communicate()
            assert busybox_target.get() == USER_CRONTAB and not count.exists()
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        out, err = waiting.communicate(timeout=60)
    finally:
        os.close(fd)
        if waiting is not None and waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    assert waiting.returncode == 0, err
    assert busybox_target.get() == USER_CRONTAB + second.block()
    assert count.read_text() == "\n"
