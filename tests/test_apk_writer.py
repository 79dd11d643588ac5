"""The apk v3 writer (scripts/pkgbuild/apk.py) against packages made by the real `apk mkpkg`
3.0.2 of OpenWrt 25.12: the vectors in shared/apk-vectors, beside the repository (their
README.md and FORMAT.md describe them). QL_APK_VECTORS names another place for them."""
from __future__ import annotations

import os
import shutil
import sys
import zlib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from pkgbuild import apk  # noqa: E402

VECTORS = ["hello", "tree", "unicode"]
EPOCH = 1700000000  # every vector's SOURCE_DATE_EPOCH (command.txt)
# FORMAT.md §2: the apk that made the vectors deflates with zlib 1.2.13; another zlib build
# may give different, equally valid deflate bytes.
VECTORS_ZLIB = "1.2.13"


@pytest.fixture(scope="module")
def vectors() -> str:
    path = os.environ.get("QL_APK_VECTORS") or os.path.join(os.path.dirname(ROOT), "shared", "apk-vectors")
    if not os.path.isfile(os.path.join(path, "FORMAT.md")):
        message = f"the apk vectors are not at {path} (shared/apk-vectors beside the repository)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def mkpkg_arguments(vector_dir: str) -> tuple[dict, dict, str]:
    """info, scripts and output name from the vector's command.txt, as mkpkg read them."""
    with open(os.path.join(vector_dir, "command.txt"), encoding="utf-8") as f:
        argv = f.read().split("--- argv ---\n", 1)[1].splitlines()
    assert argv[0] == "mkpkg"
    info, scripts, output = {}, {}, None
    for option, value in zip(argv[1::2], argv[2::2], strict=True):
        if option == "--info":
            key, _, text = value.partition(":")
            info[key] = text.split() if key == "depends" else text
        elif option == "--script":
            key, _, path = value.partition(":")
            with open(os.path.join(vector_dir, path), "rb") as f:
                scripts[key] = f.read()
        elif option == "--output":
            output = value
        else:
            assert option == "--files" and value == "input"
    return info, scripts, output


def restore_input(vector_dir: str, into) -> str:
    """A copy of input/ as mkpkg saw it: modes, symlinks and empty directories from modes.txt."""
    staged = os.path.join(str(into), "input")
    shutil.copytree(os.path.join(vector_dir, "input"), staged, symlinks=True)
    for top, dirs, _files in os.walk(staged):
        for name in dirs:
            os.chmod(os.path.join(top, name), 0o755)
    os.chmod(staged, 0o755)
    with open(os.path.join(vector_dir, "modes.txt"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            path, kind, mode, _owner, target = line.rstrip("\n").split("\t")
            if path != "input" and not path.startswith("input/"):
                continue  # scripts/: mkpkg reads their bytes only
            full = os.path.join(str(into), path)
            if kind == "d":
                os.makedirs(full, exist_ok=True)
            elif kind == "l" and not os.path.islink(full):
                os.unlink(full)  # a copy that lost the symlink holds its text as a file
                os.symlink(target, full)
            if kind != "l":
                os.chmod(full, int(mode, 8))
    return staged


def build_vector(vector_dir: str, tmp_path, compression: str) -> bytes:
    info, scripts, _output = mkpkg_arguments(vector_dir)
    staged = restore_input(vector_dir, tmp_path)
    out = os.path.join(str(tmp_path), "out.apk")
    apk.write_apk(out, staged, info, scripts or None, epoch=EPOCH, compression=compression)
    with open(out, "rb") as f:
        return f.read()


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.parametrize("vector", VECTORS)
def test_it_writes_the_bytes_mkpkg_wrote_uncompressed(vectors, tmp_path, vector):
    vector_dir = os.path.join(vectors, vector)
    _info, _scripts, output = mkpkg_arguments(vector_dir)
    expected = read_bytes(os.path.join(vector_dir, output.replace(".apk", ".uncompressed.apk")))
    assert build_vector(vector_dir, tmp_path, "none") == expected


@pytest.mark.parametrize("vector", VECTORS)
def test_it_writes_the_bytes_mkpkg_wrote_deflated(vectors, tmp_path, vector):
    if zlib.ZLIB_RUNTIME_VERSION != VECTORS_ZLIB:
        pytest.skip(f"zlib {zlib.ZLIB_RUNTIME_VERSION} here, the vectors were deflated by zlib "
                    f"{VECTORS_ZLIB}: deflate bytes may differ (the uncompressed test still runs)")
    vector_dir = os.path.join(vectors, vector)
    _info, _scripts, output = mkpkg_arguments(vector_dir)
    assert build_vector(vector_dir, tmp_path, "deflate") == read_bytes(os.path.join(vector_dir, output))


@pytest.mark.parametrize("vector", VECTORS)
def test_its_deflated_package_inflates_to_the_uncompressed_one(vectors, tmp_path, vector):
    vector_dir = os.path.join(vectors, vector)
    _info, _scripts, output = mkpkg_arguments(vector_dir)
    deflated = build_vector(vector_dir, tmp_path / "d", "deflate")
    assert deflated[:4] == b"ADBd"
    expected = read_bytes(os.path.join(vector_dir, output.replace(".apk", ".uncompressed.apk")))
    assert zlib.decompress(deflated[4:], -15) == expected


@pytest.mark.parametrize("vector", VECTORS)
def test_read_apk_reads_what_mkpkg_wrote(vectors, tmp_path, vector):
    vector_dir = os.path.join(vectors, vector)
    info, scripts, output = mkpkg_arguments(vector_dir)
    staged = restore_input(vector_dir, tmp_path)
    package = apk.read_apk(os.path.join(vector_dir, output))
    expected_info = {key: value for key, value in info.items() if value}
    assert {key: package["info"][key] for key in expected_info} == expected_info
    assert set(package["info"]) == set(expected_info) | {"hashes", "installed-size"}
    assert package["scripts"] == scripts
    on_disk = []
    for top, dirs, files in os.walk(staged):
        rel = os.path.relpath(top, staged)
        rel = "" if rel == "." else rel
        on_disk.append((rel, os.stat(top).st_mode & 0o7777, None))
        for name in dirs + files:
            full = os.path.join(top, name)
            if os.path.islink(full) or not os.path.isdir(full):
                on_disk.append((os.path.join(rel, name), os.lstat(full).st_mode & 0o7777,
                                os.readlink(full) if os.path.islink(full) else read_bytes(full)))
    read = [(e["path"], e["mode"], e["target"] if e["type"] == "symlink" else e["data"])
            for e in package["entries"]]
    assert sorted(read) == sorted(on_disk)
    assert {(e["user"], e["group"]) for e in package["entries"]} == {("root", "root")}


def make_tree(root) -> None:
    """A staged tree with every kind of entry the writer takes."""
    os.makedirs(os.path.join(root, "etc/config"))
    os.makedirs(os.path.join(root, "usr/lib/demo/empty-dir"))
    os.makedirs(os.path.join(root, "usr/bin"))
    for top, _dirs, _files in os.walk(root):
        os.chmod(top, 0o755)
    files = {"etc/config/demo": (0o600, b"config demo 'main'\n"),
             "usr/bin/demo": (0o755, b"#!/bin/sh\necho demo\n"),
             "usr/lib/demo/empty": (0o644, b""),
             "usr/lib/demo/blob.bin": (0o644, bytes(range(256)) * 300),
             "usr/lib/demo/naïve file.txt": (0o644, "héllo\n".encode())}
    for path, (mode, data) in files.items():
        with open(os.path.join(root, path), "wb") as f:
            f.write(data)
        os.chmod(os.path.join(root, path), mode)
    os.symlink("../../bin/demo", os.path.join(root, "usr/lib/demo/link"))


FULL_INFO = {
    "name": "demo", "version": "0.1.0_rc1-r2", "arch": "noarch", "description": "Démo package",
    "license": "MIT", "origin": "package/demo", "maintainer": "Someone <a@example.invalid>",
    "url": "https://example.invalid/demo", "provider-priority": 100,
    "depends": ["python3-light>=3.11", "b", "a", "a", "c<2", "d~1", "e=1", "f<=3", "g>1", "!h", "lib,x"],
    "provides": ["demo-any", "demo-alt=0.1.0"], "replaces": ["old-demo"],
    "install-if": ["demo", "luci"], "recommends": ["python3-flask"],
}
ALL_SCRIPTS = {name: f"#!/bin/sh\necho {name}\n".encode() for name in apk.SCRIPTS}
ALL_SCRIPTS["post-upgrade"] = b"#!/bin/sh\n" + b"# long enough for a blob16\n" * 20


@pytest.mark.parametrize("compression", ["none", "deflate"])
def test_read_apk_round_trips_what_write_apk_wrote(tmp_path, compression):
    root = str(tmp_path / "root")
    make_tree(root)
    out = str(tmp_path / "demo.apk")
    apk.write_apk(out, root, FULL_INFO, ALL_SCRIPTS, epoch=1234567890, compression=compression)
    assert read_bytes(out)[:4] == (b"ADBd" if compression == "deflate" else b"ADB.")
    package = apk.read_apk(out)
    info = dict(package["info"])
    assert len(info.pop("hashes")) == 40
    assert info.pop("installed-size") == 19 + 20 + 0 + 76800 + 7
    assert info == {**FULL_INFO,
                    "depends": ["a", "b", "c<2", "d~1", "e=1", "f<=3", "g>1", "!h", "lib,x",
                                "python3-light>=3.11"],
                    "provides": ["demo-alt=0.1.0", "demo-any"], "install-if": ["demo", "luci"]}
    assert package["scripts"] == ALL_SCRIPTS
    entries = [(e["path"], e["type"], e["mode"], e["size"], e["mtime"], e["target"], e["data"])
               for e in package["entries"]]
    blob = bytes(range(256)) * 300
    assert entries == [
        ("", "dir", 0o755, None, None, None, None),
        ("etc", "dir", 0o755, None, None, None, None),
        ("etc/config", "dir", 0o755, None, None, None, None),
        ("etc/config/demo", "file", 0o600, 19, 1234567890, None, b"config demo 'main'\n"),
        ("usr", "dir", 0o755, None, None, None, None),
        ("usr/bin", "dir", 0o755, None, None, None, None),
        ("usr/bin/demo", "file", 0o755, 20, 1234567890, None, b"#!/bin/sh\necho demo\n"),
        ("usr/lib", "dir", 0o755, None, None, None, None),
        ("usr/lib/demo", "dir", 0o755, None, None, None, None),
        ("usr/lib/demo/blob.bin", "file", 0o644, 76800, 1234567890, None, blob),
        ("usr/lib/demo/empty", "file", 0o644, 0, 1234567890, None, b""),
        ("usr/lib/demo/link", "symlink", 0o777, 14, 1234567890, "../../bin/demo", None),
        ("usr/lib/demo/naïve file.txt", "file", 0o644, 7, 1234567890, None, "héllo\n".encode()),
        ("usr/lib/demo/empty-dir", "dir", 0o755, None, None, None, None),
    ]
    assert {(e["user"], e["group"]) for e in package["entries"]} == {("root", "root")}


def test_it_gives_the_same_bytes_twice_and_others_for_another_epoch(tmp_path):
    root = str(tmp_path / "root")
    make_tree(root)
    built = []
    for name, epoch in (("a", 1700000000), ("b", 1700000000), ("c", 1700000001)):
        apk.write_apk(str(tmp_path / name), root, FULL_INFO, ALL_SCRIPTS, epoch=epoch)
        built.append(read_bytes(str(tmp_path / name)))
    assert built[0] == built[1] != built[2]


def test_it_records_the_staged_roots_own_mode(tmp_path):
    root = str(tmp_path / "root")
    make_tree(root)
    os.chmod(root, 0o700)
    apk.write_apk(str(tmp_path / "p.apk"), root, FULL_INFO, epoch=EPOCH, compression="none")
    assert apk.read_apk(str(tmp_path / "p.apk"))["entries"][0]["mode"] == 0o700


def test_it_stores_one_dependency_list_sorted_without_repeats(tmp_path):
    root = str(tmp_path / "root")
    os.mkdir(root)
    info = {"name": "x", "version": "1", "arch": "noarch", "depends": ["b", "a", "a", "a,b"]}
    apk.write_apk(str(tmp_path / "p.apk"), root, info, epoch=EPOCH)
    package = apk.read_apk(str(tmp_path / "p.apk"))
    assert package["info"]["depends"] == ["a", "a,b", "b"]
    assert package["info"]["installed-size"] == 1  # mkpkg's floor for a tree without bytes


def wrote_nothing(tmp_path) -> bool:
    return not [name for name in os.listdir(tmp_path) if name != "root"]


@pytest.mark.parametrize("info, message", [
    ({"nmae": "x"}, "unknown info key 'nmae'"),
    ({"installed-size": 3}, "unknown info key 'installed-size'"),
    ({"name": ""}, "info 'name' is required"),
    ({"version": "0.1.0-1"}, "info 'version' '0.1.0-1' is not a valid apk version"),
    ({"arch": ""}, "info 'arch' is required"),
    ({"license": 3}, "info 'license' must be a str"),
    ({"provider-priority": "100"}, "info 'provider-priority' must be an int"),
    ({"depends": "a b"}, "info 'depends' must be a list of dependency strings"),
    ({"depends": ["a b"]}, "'a b' is not a dependency"),
    ({"depends": ["a>1.0-1"]}, "'a>1.0-1' needs an operator"),
    ({"depends": ["a><1"]}, "'a><1' needs an operator"),
    ({"depends": ["a>1", "a<3"]}, "two different constraints on 'a'"),
])
def test_it_refuses_bad_info_and_writes_nothing(tmp_path, info, message):
    os.mkdir(tmp_path / "root")
    full = {"name": "x", "version": "1", "arch": "noarch", **info}
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        apk.write_apk(str(tmp_path / "p.apk"), str(tmp_path / "root"), full, epoch=EPOCH)
    assert wrote_nothing(tmp_path)


# README.md, "Names": what mkpkg 3.0.2 accepts and refuses as a package name.
GOOD_NAMES = ["hello", "Hello", "python3-light", "lib.so+x", "a_b", "9p"]
BAD_NAMES = ["_x", "-x", "a b", "héllo", "a:b", "a/b"]


@pytest.mark.parametrize("name", GOOD_NAMES + BAD_NAMES)
def test_it_checks_the_package_name_as_mkpkg_does(tmp_path, name):
    os.mkdir(tmp_path / "root")
    info = {"name": name, "version": "1", "arch": "noarch"}
    out = str(tmp_path / "p.apk")
    if name in GOOD_NAMES:
        apk.write_apk(out, str(tmp_path / "root"), info, epoch=EPOCH)
        assert apk.read_apk(out)["info"]["name"] == name
    else:
        with pytest.raises(ValueError, match="not a valid apk package name"):
            apk.write_apk(out, str(tmp_path / "root"), info, epoch=EPOCH)
        assert wrote_nothing(tmp_path)


@pytest.mark.parametrize("kind", ["hard link", "fifo"])
def test_it_refuses_entries_it_cannot_record_as_mkpkg_would(tmp_path, kind):
    root = tmp_path / "root"
    os.mkdir(root)
    (root / "a").write_bytes(b"a")
    if kind == "hard link":
        os.link(root / "a", root / "b")
    else:
        os.mkfifo(root / "b")
    with pytest.raises(ValueError, match="hard link" if kind == "hard link" else "not a directory"):
        apk.write_apk(str(tmp_path / "p.apk"), str(root), {"name": "x", "version": "1", "arch": "noarch"},
                      epoch=EPOCH)
    assert wrote_nothing(tmp_path)


@pytest.mark.parametrize("kwargs, message", [
    ({"scripts": {"postinst": b""}}, "unknown script 'postinst'"),
    ({"scripts": {"trigger": b""}}, "unknown script 'trigger'"),
    ({"scripts": {"post-install": "text"}}, "script 'post-install' must be bytes"),
    ({"epoch": -1}, "epoch must be"),
    ({"compression": "zstd"}, "compression must be"),
])
def test_it_refuses_bad_scripts_epoch_and_compression(tmp_path, kwargs, message):
    os.mkdir(tmp_path / "root")
    kwargs = {"epoch": EPOCH, **kwargs}
    with pytest.raises(ValueError, match=message):
        apk.write_apk(str(tmp_path / "p.apk"), str(tmp_path / "root"),
                      {"name": "x", "version": "1", "arch": "noarch"}, **kwargs)
    assert wrote_nothing(tmp_path)


# README.md, "Versions mkpkg 3.0.2 accepts": every example, accepted and refused.
ACCEPTED = ["1.0.0-r1", "0.1.0_rc1-r2", "0.1.0-r2", "0.1.0", "0.1.0_rc1", "0.1.0_rc-r1",
            "0.1.0_rc1_p2", "0.1.0_p", "0.1.0_alpha", "0.1.0_beta2", "0.1.0_pre1", "0.1.0_cvs1",
            "0.1.0_svn1", "0.1.0_git20250101", "0.1.0_hg1", "0.1.0_p1", "0.1.0a", "0.1.0a-r1",
            "0.1.0a_rc1", "0.1.0~abc123-r1", "1.0.0_rc1~abc-r3", "0.1.0-r01", "1", "00", "0.01.0",
            "2024.01.01", "1.0-r0", "1.2.3.4.5.6", "9999999999999999999"]
REFUSED = ["0.1.0-1", "1.0.0-rc1", "0.1.0-r", "1.0.0-R1", "1.0.0_RC1", "0.1.0A", "0.1.0_foo1",
           "0.1.0ab", "0.1.0~ABC", "0.1.0~xyz", "0.1.0~", "0.1.0-r1-r2", "0.1.0.dev1",
           "0.1.0+build1", "v0.1.0", "1.", ".1", "1..0", "1.0.0 "]


@pytest.mark.parametrize("version", ACCEPTED)
def test_valid_apk_version_accepts_what_mkpkg_accepts(version):
    assert apk.valid_apk_version(version)


@pytest.mark.parametrize("version", REFUSED + ["", "1.0\n", "١.٠"])
def test_valid_apk_version_refuses_what_mkpkg_refuses(version):
    assert not apk.valid_apk_version(version)


@pytest.mark.parametrize("version, release, expected", [
    ("0.1.0rc1", 2, "0.1.0_rc1-r2"),
    ("0.1.0a1", 0, "0.1.0_alpha1-r0"),
    ("0.1.0b1", 1, "0.1.0_beta1-r1"),
    ("0.1.0.post1", 1, "0.1.0_p1-r1"),
    ("0.1.0rc1.post2", 3, "0.1.0_rc1_p2-r3"),
    ("0.1.0", 1, "0.1.0-r1"),
    ("2024.1", 10, "2024.1-r10"),
])
def test_apk_version_maps_python_versions(version, release, expected):
    assert apk.apk_version(version, release) == expected
    assert apk.valid_apk_version(expected)


@pytest.mark.parametrize("version, release", [
    ("0.1.0.dev1", 1), ("0.1.0+local", 1), ("0.1.0rc1.dev2", 1), ("v0.1.0", 1), ("1!0.1.0", 1),
    ("0.1.0", -1), ("0.1.0", "1"), ("0.1.0", True),
])
def test_apk_version_refuses_what_has_no_apk_form(version, release):
    with pytest.raises(ValueError, match="has no apk form"):
        apk.apk_version(version, release)
