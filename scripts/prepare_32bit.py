#!/usr/bin/env python3
"""Prepare the emulated 32-bit routers that tests/test_32bit.py runs the service on.

For each architecture (armhf, mipsel) it unpacks a Debian userland holding python3.11 (its
stdlib carries sqlite3) and python3-psycopg2 with `mmdebstrap --variant=extract`, from the
machine's configured package sources; `qemu-<arch>-static -L ROOT ROOT/usr/bin/python3.11`
then runs it without binfmt. The service's pure-Python dependencies go in one folder shared
by every architecture, at the versions the running Python has installed.

Everything is cached under one folder (default /opt/qlshadow-ci/qemu32, or QL_32BIT_DIR),
each piece named by a digest of what it holds, so a later run on the same machine reuses
it and a changed package list or version makes a new one. Needs root (mmdebstrap's root
mode), mmdebstrap and qemu-user-static; .ci/run installs them.

    python scripts/prepare_32bit.py            # prepare (or reuse), print the paths as JSON
    python scripts/prepare_32bit.py --check    # exit 1 with the reason when not prepared
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile

DEFAULT_DIR = "/opt/qlshadow-ci/qemu32"
# The userland comes from the main archive alone: mmdebstrap's default also reads the
# security and updates suites, and a mirror of those caught mid-sync fails the whole run.
MIRROR = "deb http://deb.debian.org/debian {suite} main"
SUITE = "bookworm"
# Debian architecture -> the qemu user-mode emulator that runs its binaries.
ARCHES = {"armhf": "qemu-arm-static", "mipsel": "qemu-mipsel-static"}
# python3.11's dependency libpython3.11-stdlib holds _sqlite3; python3-psycopg2 lets the
# emulated service use the host's PostgreSQL too (a C extension, so it comes from Debian).
DEBIAN_PACKAGES = ("python3.11", "python3-psycopg2")
# The service's requirements and theirs (setup.cfg install_requires), all pure Python here:
# peewee 4 ships a py3-none-any wheel; markupsafe falls back to its pure `_native` module
# when its C speedups are missing, so any compiled file is removed from the shared folder.
PURE = ("flask", "werkzeug", "jinja2", "markupsafe", "itsdangerous", "click", "blinker",
        "waitress", "peewee", "cronsim")
PYTHON = "/usr/bin/python3.11"


def cache_dir() -> str:
    """The folder holding the userlands and the shared site folder."""
    return os.environ.get("QL_32BIT_DIR") or DEFAULT_DIR


def _digest(parts) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def pinned() -> list:
    """name==version of each pure dependency, as installed for the running Python."""
    return [f"{name}=={importlib.metadata.version(name)}" for name in PURE]


def root_path(arch: str, base: str | None = None) -> str:
    """Where the userland of one architecture lives, named by what it holds."""
    key = _digest([SUITE, arch, *DEBIAN_PACKAGES])
    return os.path.join(base or cache_dir(), f"root-{arch}-{key}")


def site_path(base: str | None = None) -> str:
    """Where the shared pure-Python packages live, named by their versions."""
    return os.path.join(base or cache_dir(), f"site-{_digest(pinned())}")


def missing(base: str | None = None) -> str | None:
    """Why the 32-bit runs cannot start (one sentence), or None when everything is ready."""
    for arch, emulator in ARCHES.items():
        if shutil.which(emulator) is None:
            return f"{emulator} is not installed (Debian package qemu-user-static)"
        if not os.path.isfile(os.path.join(root_path(arch, base), PYTHON.lstrip("/"))):
            return (f"no {arch} userland at {root_path(arch, base)}: "
                    "run scripts/prepare_32bit.py (as root)")
    if not os.path.isdir(site_path(base)):
        return f"no shared site folder at {site_path(base)}: run scripts/prepare_32bit.py"
    return None


def command(arch: str, base: str | None = None) -> list:
    """The argv prefix that runs the emulated python3.11 of one architecture."""
    root = root_path(arch, base)
    return [shutil.which(ARCHES[arch]) or ARCHES[arch], "-L", root, root + PYTHON]


def _prepare_root(arch: str, base: str) -> None:
    final = root_path(arch, base)
    if os.path.isfile(os.path.join(final, PYTHON.lstrip("/"))):
        return
    # Unpacked beside the final folder and renamed into place: an interrupted run leaves
    # no half userland under the final name.
    work = tempfile.mkdtemp(prefix=f".{arch}-", dir=base)
    try:
        subprocess.run(["mmdebstrap", "--quiet", "--variant=extract", f"--arch={arch}",
                        "--include=" + ",".join(DEBIAN_PACKAGES), SUITE, work + "/root",
                        MIRROR.format(suite=SUITE)],
                       check=True)
        # The extract variant runs no maintainer scripts, so the stdlib has no bytecode:
        # compiled once here by the emulated Python itself, every later start is twice as fast.
        root = work + "/root"
        subprocess.run([shutil.which(ARCHES[arch]) or ARCHES[arch], "-L", root, root + PYTHON,
                        "-m", "compileall", "-q", "-j", "0", root + "/usr/lib/python3.11",
                        root + "/usr/lib/python3/dist-packages"],
                       check=True, stdout=subprocess.DEVNULL)
        shutil.rmtree(final, ignore_errors=True)
        os.rename(work + "/root", final)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _prepare_site(base: str) -> None:
    final = site_path(base)
    if os.path.isdir(final):
        return
    work = tempfile.mkdtemp(prefix=".site-", dir=base)
    try:
        target = os.path.join(work, "site")
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
               "--disable-pip-version-check", "--target", target]
        wanted = pinned()
        wheels = [p for p in wanted if not p.startswith("markupsafe==")]
        # Pure wheels only, whatever platform this host is.
        subprocess.run(pip + ["--only-binary=:all:", "--platform", "any", "--implementation", "py",
                              "--python-version", "3.11", *wheels], check=True)
        subprocess.run(pip + ["--no-binary", "markupsafe",
                              *[p for p in wanted if p.startswith("markupsafe==")]], check=True)
        for folder, _, names in os.walk(target):
            for name in names:
                if name.endswith((".so", ".pyd")):
                    os.remove(os.path.join(folder, name))
        os.rename(target, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def prepare(base: str | None = None) -> dict:
    """Make (or reuse) every userland and the site folder; their paths."""
    base = base or cache_dir()
    os.makedirs(base, exist_ok=True)
    for arch in ARCHES:
        _prepare_root(arch, base)
    _prepare_site(base)
    return {"site": site_path(base), "roots": {arch: root_path(arch, base) for arch in ARCHES}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether it is ready")
    args = parser.parse_args(argv)
    if args.check:
        reason = missing()
        print(reason or "ready")
        return 1 if reason else 0
    print(json.dumps(prepare(), indent=2))
    reason = missing()
    if reason:
        print(f"prepare_32bit: {reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
