"""Stage the OpenWrt package's tree once, for both writers (ipk.py, apk.py).

The tree is conf/openwrt/files.txt's files plus the libraries pinned in
conf/openwrt/bundled.txt, copied from the building Python's install, which must hold exactly
those versions. Python modules ship as sources: half the flash of sourceless byte code
(docs/PERFORMANCE.md, "OpenWrt packages"); /usr/bin/qlshadow runs Python with -B, so
nothing is ever written beside them. compile_tree() makes the byte-code variant that
scripts/bench_package_start.py compares.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANIFEST = os.path.join(ROOT, "conf", "openwrt", "files.txt")
BUNDLED = os.path.join(ROOT, "conf", "openwrt", "bundled.txt")
SCRIPTS_DIR = os.path.join(ROOT, "conf", "openwrt")
LIB = "/usr/lib/qlshadow"
NAME = "qlshadow"

# Each writer's release and the Python minor version its feed ships.
RELEASES = {"24.10": (3, 11), "25.12": (3, 13)}

# The split stdlib packages the service imports, used while this tree has no feed records
# (scripts/pkgbuild/feeds.py): depends() below is the one place those plug in.
# urllib.parse (werkzeug, ours), email (http.client; python3-urllib depends on it anyway),
# unicodedata in python3-codecs (werkzeug.utils at load time, and the idna codec that
# socket.getaddrinfo applies to every str host), decimal and uuid (peewee at load time).
_PROVISIONAL_DEPENDS = ("python3-light", "python3-sqlite3", "python3-logging", "python3-urllib",
                        "python3-email", "python3-codecs", "python3-decimal", "python3-uuid")

# What is never carried from a bundled distribution: byte code, native speedups and their
# C sources, type stubs.
_NOT_CARRIED = re.compile(r"(^|/)__pycache__/|\.(pyc|pyo|so|pyd|c|h|pyi)$|(^|/)py\.typed$")


class BuildError(Exception):
    """The package cannot be built as asked; the message says why in one sentence."""


@dataclass(frozen=True)
class Entry:
    """One line of files.txt."""
    source: str
    target: str
    mode: int
    conffile: bool


@dataclass(frozen=True)
class Bundle:
    """One line of bundled.txt."""
    name: str
    version: str
    carry: tuple
    leave_out: tuple


@dataclass
class Staged:
    """A staged tree and what the writers need to know about it."""
    tree: str
    release: str
    conffiles: list
    bundled: list


def depends(release: str) -> list[str]:
    """The OpenWrt packages the package declares for a release."""
    if release not in RELEASES:
        raise BuildError(f"unknown OpenWrt release {release!r}: one of {', '.join(RELEASES)}")
    try:
        from . import feeds
    except ImportError:
        return list(_PROVISIONAL_DEPENDS)
    return feeds.depends(release)


def package_version(version: str, release: int) -> str:
    """Our version as both package managers get it: apk's rules ("0.1.0", 2 -> "0.1.0-r2")."""
    try:
        from .apk import apk_version
    except ImportError:
        # Only plain N.N.N versions until the apk writer's mapping is here.
        if not re.fullmatch(r"[0-9]+(\.[0-9]+)*", version) or release < 0:
            raise BuildError(f"version {version!r} release {release} has no package form") from None
        return f"{version}-r{release}"
    try:
        return apk_version(version, release)
    except ValueError as exc:
        raise BuildError(str(exc)) from None


def app_version() -> str:
    """qlshadow.__version__, read from app/__init__.py without importing it."""
    with open(os.path.join(ROOT, "app", "__init__.py"), encoding="utf-8") as fh:
        match = re.search(r'^__version__ = "([^"]+)"$', fh.read(), re.MULTILINE)
    if not match:
        raise BuildError("app/__init__.py has no __version__ line")
    return match.group(1)


def read_manifest(path: str = MANIFEST) -> list[Entry]:
    """The lines of files.txt."""
    entries = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            if len(fields) not in (3, 4) or (len(fields) == 4 and fields[3] != "conffile") \
                    or not fields[1].startswith("/") or not re.fullmatch(r"0[0-7]{3}", fields[2]):
                raise BuildError(f"{path}:{number}: expected REPO_PATH /DEVICE/PATH 0MODE [conffile]")
            entries.append(Entry(fields[0], fields[1], int(fields[2], 8), len(fields) == 4))
    return entries


def read_bundled(path: str = BUNDLED) -> list[Bundle]:
    """The lines of bundled.txt."""
    bundles = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            name, _, version = fields[0].partition("==")
            carry = tuple(f for f in fields[1:] if not f.startswith("!"))
            if not name or not version or not carry:
                raise BuildError(f"{path}:{number}: expected NAME==VERSION PATH... [!PATH...]")
            bundles.append(Bundle(name, version, carry,
                                  tuple(f[1:] for f in fields[1:] if f.startswith("!"))))
    return bundles


def check_bundled(bundles: list[Bundle]) -> None:
    """Refuse a building Python whose installed versions are not the pinned ones."""
    from importlib import metadata

    wrong = []
    for bundle in bundles:
        try:
            installed = metadata.version(bundle.name)
        except metadata.PackageNotFoundError:
            installed = "not installed"
        if installed != bundle.version:
            wrong.append(f"{bundle.name} {installed} (pinned {bundle.version})")
    if wrong:
        raise BuildError(f"{sys.executable} does not hold the versions conf/openwrt/bundled.txt "
                         f"pins: {', '.join(wrong)}; install them (pip install -e '.[test]')")


def _copy(source: str, target: str, mode: int) -> None:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copyfile(source, target)
    os.chmod(target, mode)


def _stage_entry(entry: Entry, tree: str) -> list[str]:
    """Copy one manifest entry into the tree; the device paths it made."""
    source = os.path.join(ROOT, entry.source)
    made = []
    if any(c in entry.source for c in "*?["):
        if not entry.target.endswith("/"):
            raise BuildError(f"files.txt: {entry.source} is a glob, so {entry.target} must end in /")
        for path in sorted(glob.glob(source)):
            if os.path.isfile(path):
                made.append(entry.target + os.path.basename(path))
                _copy(path, tree + made[-1], entry.mode)
    elif os.path.isdir(source):
        for folder, dirs, names in os.walk(source):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(names):
                rel = os.path.relpath(os.path.join(folder, name), source)
                if name.startswith(".") or _NOT_CARRIED.search(rel):
                    continue
                made.append(entry.target.rstrip("/") + "/" + rel)
                _copy(os.path.join(folder, name), tree + made[-1], entry.mode)
    elif os.path.isfile(source):
        made.append(entry.target)
        _copy(source, tree + entry.target, entry.mode)
    if not made:
        raise BuildError(f"files.txt: {entry.source} names no file")
    return made


def compile_catalogs(lib_dir: str) -> None:
    """Replace each staged translation source (.po) by the .mo that gettext reads."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("qlshadow_stage_msgfmt",
                                                  os.path.join(ROOT, "app", "msgfmt.py"))
    msgfmt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(msgfmt)
    for po in glob.glob(os.path.join(lib_dir, "qlshadow", "locale", "*", "LC_MESSAGES", "*.po")):
        msgfmt.compile_file(po, po[:-3] + ".mo")
        os.chmod(po[:-3] + ".mo", os.stat(po).st_mode & 0o7777)
        os.remove(po)


def _set_data_dir(path: str) -> None:
    """The packaged qlshadow.conf keeps data on the flash overlay (/srv/qlshadow)."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    text, count = re.subn(r"^QL_DATA_DIR=.*$", "QL_DATA_DIR=/srv/qlshadow", text, flags=re.MULTILINE)
    if count != 1:
        raise BuildError("conf/qlshadow.conf needs exactly one QL_DATA_DIR= line to set")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def _stage_bundle(bundle: Bundle, vendor: str) -> None:
    """Copy one bundled distribution's carried files, licence and METADATA into vendor/."""
    from importlib import metadata

    dist = metadata.distribution(bundle.name)
    carried = 0
    for file in dist.files or ():
        rel = str(file).replace(os.sep, "/")
        if not any(rel == c or rel.startswith(c.rstrip("/") + "/") for c in bundle.carry):
            continue
        if any(rel == x or rel.startswith(x.rstrip("/") + "/") for x in bundle.leave_out):
            continue
        if _NOT_CARRIED.search(rel):
            continue
        _copy(str(dist.locate_file(file)), os.path.join(vendor, rel), 0o644)
        carried += 1
    if not carried:
        raise BuildError(f"bundled.txt: {bundle.name} carries no file ({' '.join(bundle.carry)})")
    licences = [f for f in dist.files or ()
                if os.path.basename(str(f)).upper().startswith(("LICENSE", "LICENCE", "COPYING"))]
    if not licences:
        raise BuildError(f"{bundle.name} {bundle.version} has no licence file to carry")
    _copy(str(dist.locate_file(licences[0])), os.path.join(vendor, f"LICENSE.{bundle.name}"), 0o644)
    # importlib.metadata finds the bundled versions (Flask reads its own; serve checks
    # waitress's against the range its callback lane was tested with).
    info = os.path.join(vendor, f"{bundle.name}-{bundle.version}.dist-info", "METADATA")
    os.makedirs(os.path.dirname(info), exist_ok=True)
    with open(info, "w", encoding="utf-8") as fh:
        fh.write(dist.read_text("METADATA") or f"Name: {bundle.name}\nVersion: {bundle.version}\n")
    os.chmod(info, 0o644)


def find_python(release: str) -> str:
    """The interpreter whose byte code the release's Python loads (same minor version).

    QL_PYTHON_<major>_<minor> (e.g. QL_PYTHON_3_11) names it; else python3.X on PATH, else
    pyenv's newest 3.X."""
    major, minor = RELEASES[release]
    named = os.environ.get(f"QL_PYTHON_{major}_{minor}")
    candidates = [named] if named else []
    if not named:
        candidates.append(shutil.which(f"python{major}.{minor}"))
        pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
        candidates += sorted(glob.glob(os.path.join(pyenv, "versions", f"{major}.{minor}.*", "bin",
                                                    f"python{major}.{minor}")), reverse=True)
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() == str((major, minor)):
            return candidate
    raise BuildError(f"OpenWrt {release} runs Python {major}.{minor} and no python{major}.{minor} "
                     f"was found to compile its byte code: set QL_PYTHON_{major}_{minor}")


# Run by the release's Python: legacy sourceless .pyc beside each module, named in
# tracebacks by its device path, hash-stamped (no source mtime in it: reproducible), with a
# fixed hash seed (set constants are marshalled in hash order).
_COMPILE = """
import json, os, py_compile, sys
lib, device = sys.argv[1], sys.argv[2]
for folder, dirs, names in os.walk(lib):
    dirs.sort()
    for name in sorted(names):
        if name.endswith(".py"):
            path = os.path.join(folder, name)
            py_compile.compile(path, path + "c", dfile=device + path[len(lib):], doraise=True,
                               optimize=0,
                               invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
            os.chmod(path + "c", 0o644)
            os.remove(path)
"""


def compile_tree(lib_dir: str, python: str) -> None:
    """Replace every .py under lib_dir by its sourceless byte code for that Python."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([python, "-I", "-c", _COMPILE, lib_dir, LIB], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"{python} could not compile the package: {done.stderr.strip()[-500:]}")


def stage(tree: str | os.PathLike, release: str, *, manifest: str = MANIFEST, bundled: str = BUNDLED,
          bytecode: bool = False) -> Staged:
    """Stage the package for a release into the empty folder tree (bytecode=True: sourceless
    byte code for the release's Python instead of sources, for comparison only)."""
    tree = os.fspath(tree)
    if release not in RELEASES:
        raise BuildError(f"unknown OpenWrt release {release!r}: one of {', '.join(RELEASES)}")
    bundles = read_bundled(bundled)
    check_bundled(bundles)
    python = find_python(release) if bytecode else None
    entries = read_manifest(manifest)
    conffiles = []
    for entry in entries:
        made = _stage_entry(entry, tree)
        if entry.conffile:
            conffiles += made
    compile_catalogs(tree + LIB)
    if os.path.isfile(tree + "/etc/qlshadow/qlshadow.conf"):
        _set_data_dir(tree + "/etc/qlshadow/qlshadow.conf")
    vendor = tree + LIB + "/vendor"
    for bundle in bundles:
        _stage_bundle(bundle, vendor)
    with open(os.path.join(vendor, "VERSIONS"), "w", encoding="utf-8") as fh:
        fh.writelines(f"{b.name} {b.version}\n" for b in bundles)
    os.chmod(os.path.join(vendor, "VERSIONS"), 0o644)
    if bytecode:
        compile_tree(tree + LIB, python)
    # Modes are set, never inherited from the umask or the checkout; "/" itself included.
    for folder, _dirs, _files in os.walk(tree):
        os.chmod(folder, 0o755)
    return Staged(tree=tree, release=release, conffiles=sorted(conffiles),
                  bundled=[f"{b.name}=={b.version}" for b in bundles])

