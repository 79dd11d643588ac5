"""One crontab shared by several data dirs, and one data dir spelled two ways.

Every test installs into a real BusyBox spool (`busybox crontab -c DIR`), never the machine's
own crontab, through `qlshadow` processes of their own: the crontab lock is per crontab, so
it has to hold across processes and data dirs. Each data dir has its own database, on both
backends.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from qlshadow import config
from qlshadow.host import crontab
from helpers import create_pg_database, drop_pg_database, run_cli
from test_crontab_block import USER_CRONTAB, busybox_target  # noqa: F401  (a fixture)

MARKER = "QL_EXECUTION_ORIGIN=scheduled_system"
CHANGES = 30


@pytest.fixture
def database_url(backend, tmp_path):
    """A new empty database on the backend for each name asked: one per data dir."""
    made = []

    def make(name: str) -> str:
        if backend == "sqlite":
            return f"sqlite:///{tmp_path}/{name}.db"
        url, dbname = create_pg_database()
        made.append(dbname)
        return url
    yield make
    for dbname in made:
        drop_pg_database(dbname)


@pytest.fixture
def lock_files():
    """Lock files of the crontabs a test installs into, removed at its end (they are named by
    the test's private spool, so no other process ever uses them)."""
    paths = []
    yield paths.append
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


class DataDir:
    """One installation: a data dir, its database, and the environment of its CLI."""

    def __init__(self, path: str, db_url: str, target, lock_files):
        os.makedirs(path, exist_ok=True)
        self.path = path
        self.env = {"QL_DATA_DIR": path, "QL_DB_URL": db_url, "QL_SCHEDULER": "system",
                    "QL_CRONTAB_INSTALL": target.install, "QL_CRONTAB_LIST": target.list}
        lock_files(crontab.lock_path(self.settings()))

    def settings(self):
        return config.load(environ=self.env)

    def cli(self, *args: str, check: bool = True):
        return run_cli(self.env, *args, check=check)

    def block(self) -> bytes:
        """The block as it sits in the crontab, rendered from this data dir's database now."""
        begin, end = crontab.markers(self.settings())
        return f"{begin}\n{self.cli('crontab', '--print').stdout}{end}\n".encode()


def test_three_data_dirs_changing_one_crontab_at_once_lose_no_change_and_double_no_line(
        busybox_target, database_url, lock_files, tmp_path):  # noqa: F811
    busybox_target.put(USER_CRONTAB, tmp_path)
    dirs = [DataDir(str(tmp_path / name), database_url(name), busybox_target, lock_files)
            for name in ("d1", "d2", "d3")]
    jobs = [(data, n) for n in range(CHANGES) for data in dirs]

    def add(job):
        data, n = job
        return data.cli("cron", "add", "*/5 * * * *", f"echo {os.path.basename(data.path)}-{n}",
                        check=False)

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(add, jobs))
    assert [r.stderr for r in results if r.returncode != 0] == []
    installed = busybox_target.get()
    rest = installed
    for data in dirs:
        block = data.block()
        assert installed.count(block) == 1, (data.path, installed.decode())
        assert block.count(f" {MARKER} ".encode()) == CHANGES
        rest = rest.replace(block, b"")
    assert rest == USER_CRONTAB  # every line of the user's once, as it was
    for data in dirs:
        # Every answer named an install that is still there: /health would say installed.
        assert not os.path.exists(crontab.state_file(data.settings()))


# --- one data dir, two spellings ---------------------------------------------------------------

@pytest.fixture
def linked(busybox_target, database_url, lock_files, tmp_path):  # noqa: F811
    """(the data dir, the same dir through a symlink), one database."""
    busybox_target.put(USER_CRONTAB, tmp_path)
    url = database_url("d1")
    real = DataDir(str(tmp_path / "d1"), url, busybox_target, lock_files)
    os.symlink("d1", tmp_path / "d1link")
    link = DataDir(str(tmp_path / "d1link"), url, busybox_target, lock_files)
    return real, link


def test_a_change_through_a_symlinked_data_dir_replaces_the_one_block_named_by_the_real_path(
        busybox_target, linked):  # noqa: F811
    real, link = linked
    os.makedirs(real.path, exist_ok=True)
    crontab.write_notify_conf(real.settings(), environ={"NTFY_TOPIC": "ops"})
    real.cli("cron", "add", "*/5 * * * *", "echo first")
    link.cli("cron", "add", "*/10 * * * *", "echo second")
    installed = busybox_target.get().decode()
    real_path = os.path.realpath(real.path)
    assert installed.count("# BEGIN qlshadow ") == 2  # ours and /srv/other's
    assert installed.count(f"# BEGIN qlshadow {real_path}\n") == 1
    assert "d1link" not in installed
    ours = [line for line in installed.splitlines() if f" {MARKER} " in line
            and "/srv/other" not in line and "look-alike" not in line]
    assert len(ours) == 2
    assert all(f" QL_DATA_DIR={real_path} " in line for line in ours)
    assert f"* * * * * QL_DATA_DIR={real_path} {crontab.shell_dir()}/tick.sh\n" in installed
    assert busybox_target.get() == USER_CRONTAB + link.block() == USER_CRONTAB + real.block()


def test_a_block_an_earlier_install_marked_with_the_links_name_is_replaced_in_place(
        busybox_target, linked, tmp_path):  # noqa: F811
    real, link = linked
    begin, end = (m.replace(os.path.realpath(real.path), link.path) for m in
                  crontab.markers(real.settings()))
    old = f"{begin}\n# an earlier block\n* * * * * echo old\n{end}\n".encode()
    after = b"15 3 * * * /usr/bin/backup\n"
    busybox_target.put(USER_CRONTAB + old + after, tmp_path)
    real.cli("cron", "add", "*/5 * * * *", "echo first")
    assert busybox_target.get() == USER_CRONTAB + real.block() + after


def test_blocks_of_both_spellings_left_by_an_earlier_release_become_one(
        busybox_target, linked, tmp_path):  # noqa: F811
    real, link = linked

    def block(name: str) -> bytes:
        return f"# BEGIN qlshadow {name}\n* * * * * echo {name}\n# END qlshadow {name}\n".encode()

    between = b"# a line of the user's between them\n"
    busybox_target.put(USER_CRONTAB + block(os.path.realpath(real.path)) + between
                       + block(link.path), tmp_path)
    link.cli("cron", "add", "*/5 * * * *", "echo first")
    assert busybox_target.get() == USER_CRONTAB + real.block() + between


def test_crontab_remove_through_a_symlink_takes_out_the_one_block_and_only_its_files(
        busybox_target, linked):  # noqa: F811
    real, link = linked
    real.cli("cron", "add", "*/5 * * * *", "echo first")
    kept = sorted(os.listdir(real.path))
    assert "crontab.list" in kept
    said = link.cli("crontab", "--remove").stdout
    assert said.startswith("removed qlshadow's block with ")
    assert busybox_target.get() == USER_CRONTAB
    assert sorted(os.listdir(real.path)) == [name for name in kept if name not in (
        "crontab.list", "crontab.list.installed")]
    assert link.cli("crontab", "--remove").stdout.startswith("no qlshadow block in the crontab")
    # The data dir still works: the next change installs the block again, once.
    real.cli("cron", "add", "*/5 * * * *", "echo again")
    assert busybox_target.get() == USER_CRONTAB + real.block()


# --- another program's crontab run at the same moment ----------------------------------------

RACE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crontab_race.py")


@pytest.mark.parametrize("order", ["ours-renames", "other-renames"])
@pytest.mark.parametrize("block_before", [True, False], ids=["block-there", "first-install"])
def test_an_install_that_meets_another_crontab_run_gets_its_block_into_that_programs_text(
        busybox_target, database_url, lock_files, tmp_path, order, block_before):  # noqa: F811
    import shlex
    import sys
    from crontab_race import ADDED
    from shellenv import busybox_static
    busybox_target.put(USER_CRONTAB, tmp_path)
    data = DataDir(str(tmp_path / "d1"), database_url("d1"), busybox_target, lock_files)
    if block_before:
        data.cli("cron", "add", "*/5 * * * *", "echo first")
    note = tmp_path / "raced"
    spool = str(tmp_path / "spool")
    data.env["QL_CRONTAB_INSTALL"] = shlex.join(
        [sys.executable, RACE, order, busybox_static(), spool, str(note)]) + " {file}"
    lock_files(crontab.lock_path(data.settings()))
    said = data.cli("cron", "add", "*/10 * * * *", "echo second", check=False)
    assert said.returncode == 0, said.stderr
    ours, other = ("0", "1") if order == "ours-renames" else ("1", "0")
    assert note.read_text() == f"ours={ours} other={other}\n"  # the two runs did meet
    # The other program's line and ours, each once; the user's lines once.
    if block_before:
        assert busybox_target.get() == USER_CRONTAB + data.block() + ADDED
    else:
        assert busybox_target.get() == USER_CRONTAB + ADDED + data.block()
    assert data.block().count(f" {MARKER} ".encode()) == 1 + block_before
    assert not os.path.exists(crontab.state_file(data.settings()))


def test_an_install_another_program_undoes_every_time_fails_after_five_tries_and_changes_nothing(
        busybox_target, database_url, lock_files, tmp_path):  # noqa: F811
    import shlex
    from shellenv import busybox_static
    data = DataDir(str(tmp_path / "d1"), database_url("d1"), busybox_target, lock_files)
    data.cli("cron", "add", "*/5 * * * *", "echo first")
    kept = data.block()
    crontab_ = f"{busybox_static()} crontab -c {shlex.quote(str(tmp_path / 'spool'))}"
    tries = tmp_path / "tries"
    # Each install is followed at once by another program's, which drops our block.
    data.env["QL_CRONTAB_INSTALL"] = shlex.join(["sh", "-c", (
        f'{crontab_} "$0" && echo >> {tries} && grep -v qlshadow "$0" | {crontab_} -')]) + " {file}"
    lock_files(crontab.lock_path(data.settings()))
    said = data.cli("cron", "add", "*/10 * * * *", "echo second", check=False)
    assert said.returncode == 1
    assert "another program changed the crontab during each of 5 installs" in said.stderr
    assert tries.read_text() == "\n" * 5
    assert data.block() == kept  # the database has no second cron
    assert os.path.exists(crontab.state_file(data.settings()))


def test_an_install_whose_read_back_fails_is_taken_as_installed(
        busybox_target, database_url, lock_files, tmp_path):  # noqa: F811
    import shlex
    data = DataDir(str(tmp_path / "d1"), database_url("d1"), busybox_target, lock_files)
    once = tmp_path / "listed-once"
    # The crontab reads once (before installing), then no more.
    data.env["QL_CRONTAB_LIST"] = shlex.join(["sh", "-c", (
        f"test ! -e {once} && touch {once} && exec {busybox_target.list}")])
    lock_files(crontab.lock_path(data.settings()))
    said = data.cli("cron", "add", "*/5 * * * *", "echo first", check=False)
    assert said.returncode == 0, said.stderr
    data.env["QL_CRONTAB_LIST"] = busybox_target.list
    assert busybox_target.get() == data.block()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_the_crontab_lock_is_named_by_the_crontab_whatever_the_data_dir(make_settings, tmp_path):
    def lock(**env):
        return crontab.lock_path(make_settings(QL_SCHEDULER="system", **env))

    plain = lock(QL_CRONTAB_INSTALL="crontab -c /etc/crontabs {file}")
    assert os.path.dirname(plain) == ("/var/lock" if os.path.isdir("/var/lock") else "/tmp")
    assert lock(QL_CRONTAB_INSTALL="/bin/busybox crontab -c /etc/crontabs {file}",
                QL_DATA_DIR=str(tmp_path / "other")) == plain
    assert lock(QL_CRONTAB_INSTALL="sh -c 'crontab -c /etc/crontabs - < \"$0\"' {file}",
                QL_CRONTAB_LIST="/usr/bin/crontab -c /etc/crontabs -l") == plain
    assert lock(QL_CRONTAB_INSTALL="crontab -c /var/spool/cron {file}") != plain
    assert lock(QL_CRONTAB_INSTALL="crontab -u bob {file}") != lock()
