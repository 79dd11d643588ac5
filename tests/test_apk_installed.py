"""The OpenWrt 25.12 package as apk would install it: scripts/build-apk.sh's `.apk`, read
back and laid into an empty root, holds exactly the staging the release tests run
(tests/test_openwrt_release.py), byte for byte and mode for mode, and the unpacked tree serves,
passes the smoke check and writes nothing under /usr/lib/qlshadow on a bare Python 3.13 (the
release's) with nothing installed. The same holds of the `.ipk`'s data for 24.10."""
from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import tarfile

import pytest

from helpers import ROOT, http
from test_ipk import PackagedServer, snapshot

sys.path.insert(0, os.path.join(ROOT, "scripts"))
from pkgbuild import stage  # noqa: E402  (scripts/ is not a package)

APK_RECORDS = {f"lib/apk/packages/qlshadow.{r}" for r in ("list", "conffiles", "conffiles_static")}


def build(script: str, out_dir) -> str:
    env = {k: v for k, v in os.environ.items()
           if k not in ("SOURCE_DATE_EPOCH", "QL_PACKAGE_RELEASE")}
    env["PYTHON"] = sys.executable
    result = subprocess.run(["sh", os.path.join(ROOT, "scripts", script), str(out_dir)], env=env,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def tree_of(root) -> dict:
    """path -> (kind, permission bits, bytes or link target) of every entry under root."""
    found = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(base, name)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                body = ("l", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                body = ("d", None)
            else:
                with open(path, "rb") as fh:
                    body = ("f", fh.read())
            found[os.path.relpath(path, root)] = (body[0], stat.S_IMODE(info.st_mode), body[1])
    return found


def install_apk(package: str, root) -> None:
    """Lay the package's entries into root as apk does: directories, files, symlinks, modes."""
    from pkgbuild.apk import read_apk

    entries = read_apk(package)["entries"]
    for entry in entries:
        path = os.path.join(str(root), entry["path"])
        if entry["type"] == "dir":
            os.makedirs(path, exist_ok=True)
        elif entry["type"] == "symlink":
            os.symlink(entry["target"], path)
        else:
            assert entry["type"] == "file", entry["path"]
            with open(path, "wb") as fh:
                fh.write(entry["data"])
    for entry in reversed(entries):  # directories last: a 0555 one still takes its files
        if entry["type"] != "symlink":
            os.chmod(os.path.join(str(root), entry["path"]), stat.S_IMODE(entry["mode"]))


@pytest.fixture(scope="module")
def apk_root(tmp_path_factory):
    base = tmp_path_factory.mktemp("apk")
    root = base / "root"
    root.mkdir()
    install_apk(build("build-apk.sh", base / "dist"), root)
    return root


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """A throwaway venv of 25.12's Python minor version with nothing installed."""
    venv = tmp_path_factory.mktemp("bare313") / "venv"
    subprocess.run([stage.find_python("25.12"), "-m", "venv", "--without-pip", str(venv)],
                   check=True)
    python = str(venv / "bin" / "python")
    probe = subprocess.run([python, "-c", "import flask"], capture_output=True)
    assert probe.returncode != 0, "flask must not be installed in the bare venv"
    return python


def staged(tmp_path, release: str) -> dict:
    tree = tmp_path / f"staged-{release}"
    tree.mkdir()
    stage.stage(tree, release)
    return tree_of(tree)


def test_the_installed_apk_is_the_staging_the_release_tests_run(apk_root, tmp_path):
    installed = tree_of(apk_root)
    records = {path: installed.pop(path) for path in APK_RECORDS}
    assert (installed.pop("lib/apk/packages")[0], installed.pop("lib/apk")[0]) == ("d", "d")
    assert all(kind == "f" and mode == 0o644 for kind, mode, _ in records.values())
    expected = staged(tmp_path, "25.12")

    assert sorted(installed) == sorted(expected)
    assert {p for p in installed if installed[p] != expected[p]} == set()


def test_the_ipks_data_is_the_staging_the_release_tests_run(tmp_path):
    package = build("build-ipk.sh", tmp_path / "dist")
    with tarfile.open(package, "r:gz") as outer:
        data = outer.extractfile("./data.tar.gz").read()
    unpacked = tmp_path / "root"
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(unpacked, filter="fully_trusted")

    assert tree_of(unpacked) == staged(tmp_path, "24.10")


def test_the_installed_apk_serves_on_the_releases_bare_python_writing_nothing_under_its_lib(
        apk_root, bare_python, tmp_path):
    server = PackagedServer(apk_root, bare_python, tmp_path / "data",
                            {"QL3_SHADOW_ORIGINS": "scheduled_system"})
    lib = apk_root / "usr" / "lib" / "qlshadow"
    before = snapshot(lib)
    token = server.token()
    server.start()
    try:
        status, body = http("GET", server.url + "/health")
        page_status, page = http("GET", server.url + "/page/login")
        smoke = subprocess.run(["busybox", "sh", str(lib / "smoke.sh"), server.url, token],
                               capture_output=True, text=True, timeout=120)
    finally:
        server.stop()
    version = subprocess.run([str(apk_root / "usr" / "bin" / "qlshadow"), "--version"],
                             env=server.env, capture_output=True, text=True, timeout=60)

    assert status == 200 and body["data"]["db"] == "ok"
    assert page_status == 200 and b"<h1>Sign in</h1>" in page
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert [line for line in smoke.stdout.splitlines() if line.startswith("ok - Shadow Run")]
    assert version.returncode == 0 and version.stdout.startswith("qlshadow "), version.stderr
    assert snapshot(lib) == before
    major, minor = stage.RELEASES["25.12"]
    cached = {name for _, _, names in os.walk(server.pycache) for name in names}
    assert f"__init__.cpython-{major}{minor}.pyc" in cached
