"""The apk writer against the vectors' stub packages (shared/apk-vectors/stubs): `apk mkpkg`
3.0.2 without --files, info only. Such a package has no paths at all (the root object holds
only its info, installed-size 0), which is not the package of an empty tree: that one
records the root directory.

write_apk(out, None, info) is the writer's form of "no --files"."""
from __future__ import annotations

import os
import sys

import pytest

from helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))
from pkgbuild import apk  # noqa: E402

EPOCH = 1700000000  # the stubs' SOURCE_DATE_EPOCH (command.txt)


@pytest.fixture(scope="module")
def stubs() -> str:
    path = os.environ.get("QL_APK_VECTORS") or os.path.join(os.path.dirname(ROOT), "shared", "apk-vectors")
    path = os.path.join(path, "stubs")
    if not os.path.isfile(os.path.join(path, "command.txt")):
        message = f"the apk vectors' stubs are not at {path}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def stub_builds(stubs: str) -> list:
    """(info, output name) of each mkpkg run in the stubs' command.txt."""
    with open(os.path.join(stubs, "command.txt"), encoding="utf-8") as f:
        runs = f.read().split("--- argv ---\n")[1:]
    builds = []
    for run in runs:
        argv = run.splitlines()
        assert argv[0] == "mkpkg"
        info, output = {}, None
        for option, value in zip(argv[1::2], argv[2::2], strict=True):
            if option == "--info":
                key, _, text = value.partition(":")
                info[key] = text
            else:
                assert option == "--output", option  # no --files, no --script
                output = value
        builds.append((info, output))
    return builds


def test_the_stubs_are_two_info_only_packages_read_apk_reads(stubs):
    builds = stub_builds(stubs)
    assert [info["name"] for info, _ in builds] == ["python3-light", "python3-sqlite3"]
    for info, output in builds:
        read = apk.read_apk(os.path.join(stubs, output))
        assert read["entries"] == [] and read["scripts"] == {}
        assert read["info"]["installed-size"] == 0
        assert {k: read["info"][k] for k in info} == info


def test_an_empty_tree_is_not_a_package_without_files(stubs, tmp_path):
    info, output = stub_builds(stubs)[0]
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o755)
    apk.write_apk(str(tmp_path / "out.apk"), str(empty), info, epoch=EPOCH)
    with open(os.path.join(stubs, output), "rb") as f:
        assert (tmp_path / "out.apk").read_bytes() != f.read()


def test_it_writes_the_bytes_mkpkg_wrote_for_the_stubs(stubs, tmp_path):
    for info, output in stub_builds(stubs):
        out = tmp_path / output
        apk.write_apk(str(out), None, info, epoch=EPOCH)
        with open(os.path.join(stubs, output), "rb") as f:
            assert out.read_bytes() == f.read(), output
