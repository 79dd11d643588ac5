"""Fixtures of the fault suite: figures, a private PostgreSQL cluster, LazyFS, small tmpfs."""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import tempfile

import pytest
from helpers import REQUIRE_PG

from .helpers import PrivatePostgres, free_port, mounted_tmpfs

# --- figures --------------------------------------------------------------------------------

@pytest.fixture
def figures(request):
    """Report a scenario's figures: printed, and appended to $QL_FAULTS_REPORT if set."""
    def report(**values):
        record = {"test": request.node.nodeid.split("::", 1)[-1], **values}
        line = json.dumps(record, sort_keys=True)
        print("FIGURES " + line)
        path = os.environ.get("QL_FAULTS_REPORT")
        if path:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
    return report


@pytest.fixture(scope="module")
def private_pg():
    """Start a throwaway cluster (initdb + pg_ctl as the postgres user); remove it after."""
    bindirs = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    problem = None
    if not bindirs:
        problem = "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin"
    elif os.geteuid() == 0 and not shutil.which("runuser"):
        problem = "runuser is missing (initdb refuses to run as root)"
    if problem:
        if REQUIRE_PG:
            pytest.fail(problem + " — QL_REQUIRE_POSTGRES=1 makes this a failure")
        pytest.skip(problem)
    bindir = os.path.dirname(bindirs[-1])
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    root = tempfile.mkdtemp(prefix="qlshadow-pg-")
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    cluster = PrivatePostgres(bindir, root, free_port(), as_postgres)
    try:
        subprocess.run(as_postgres + [os.path.join(bindir, "initdb"), "-D", cluster.data, "-A",
                                      "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"],
                       check=True, capture_output=True, timeout=120)
        cluster.start()
    except (subprocess.SubprocessError, OSError) as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"could not start a private PostgreSQL cluster: {exc}") from exc
    yield cluster
    try:
        cluster.stop("immediate")
    except subprocess.SubprocessError:
        pass  # already stopped by the test
    shutil.rmtree(root, ignore_errors=True)


# --- a file system that loses what was not fsynced -------------------------------------------

@pytest.fixture
def lazyfs(tmp_path):
    """A LazyFS mount (tests/lazyfs.py) over tmp_path/backing; fails in CI (CI set, or
    .ci/run's QL_REQUIRE_POSTGRES=1) and skips elsewhere if FUSE cannot mount."""
    from lazyfs import LazyFS, MountFailed
    try:
        with LazyFS(str(tmp_path / "backing"), str(tmp_path / "mnt")) as fs:
            yield fs
    except MountFailed as exc:
        if os.environ.get("CI") or REQUIRE_PG:
            pytest.fail(f"FUSE cannot mount in CI: {exc}")
        pytest.skip(f"FUSE cannot mount here: {exc}")


@pytest.fixture
def small_tmpfs():
    """A 4 MiB tmpfs for a database driven to full."""
    yield from mounted_tmpfs("4m")


@pytest.fixture
def tmpfs_2m():
    """A 2 MiB tmpfs for the whole data directory, driven to full by task logs."""
    yield from mounted_tmpfs("2m")

