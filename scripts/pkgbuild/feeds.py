"""What OpenWrt's package feeds ship for Python, and what our package needs from them.

conf/openwrt/feeds/<release>.json records, for each supported release, the feed commit it
was read from, the Python version, the interpreter and split standard-library packages
(version, depends, the paths each owns) and the feed's packages of the libraries we bundle.
Those files are derived from a full read of the feed (feeds.json, made from the feed's
Makefiles) by `derive`; nothing here reaches the network.

    python3 scripts/pkgbuild/feeds.py derive FEEDS_JSON     rewrite conf/openwrt/feeds/*.json
    python3 scripts/pkgbuild/feeds.py depends RELEASE       our package's Depends, one a line
    python3 scripts/pkgbuild/feeds.py owner RELEASE PATH|MODULE ...

Standard library only: the packaging imports this module.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import sys

FEEDS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "conf", "openwrt",
                         "feeds")
RELEASES = ("24.10", "25.12")

# The feed's packages of what /usr/lib/qlshadow/vendor bundles, plus the ones the old
# package pulled (setuptools via python3-flask) and the optional PostgreSQL driver.
VENDORED = ("flask", "werkzeug", "jinja2", "markupsafe", "itsdangerous", "click", "blinker",
            "peewee", "waitress", "cronsim")
ALSO_RECORDED = ("setuptools", "pkg-resources", "psycopg2")

# Our package's Depends. Found by running the packaged product under each release's
# Python with every other split package hidden (tests/test_openwrt_release.py holds it):
#   python3-light    the interpreter and the unsplit stdlib (json, hashlib, socket, http,
#                    threading, argparse, smtplib, ...)
#   python3-sqlite3  the default SQLite backend
#   python3-logging  app, flask, werkzeug, peewee and waitress all log
#   python3-urllib   urllib.parse: werkzeug, jinja2, our URL parsing and notify
#   python3-email    http.client (werkzeug, notify) parses headers with it; smtplib's mail
#   python3-uuid     peewee and click import uuid at load time
# Left out on purpose: python3-codecs (unicodedata: the package's bootstrap,
# conf/openwrt/boot.py, registers an ASCII-only idna codec and stands in for werkzeug.utils'
# load-time import), python3-decimal (the bootstrap stands in for peewee's and Flask's
# load-time uses; qlshadow stores no decimal number), python3-openssl (only https and SMTP
# over SSL need ssl; notify says which package to add), and asyncio, multiprocessing and
# setuptools, which python3-flask declares but nothing here imports.
_DEPENDS = ("python3-light", "python3-sqlite3", "python3-logging", "python3-urllib",
            "python3-email", "python3-uuid")
DEPENDS = {release: _DEPENDS for release in RELEASES}

_cache: dict = {}


def load(release: str) -> dict:
    """The feed record of one release (conf/openwrt/feeds/<release>.json)."""
    if release not in RELEASES:
        raise ValueError(f"unknown OpenWrt release {release!r}: one of {', '.join(RELEASES)}")
    if release not in _cache:
        with open(os.path.join(FEEDS_DIR, f"{release}.json"), encoding="utf-8") as fh:
            _cache[release] = json.load(fh)
    return _cache[release]


def depends(release: str) -> list[str]:
    """The OpenWrt packages our package declares for that release."""
    load(release)
    return list(DEPENDS[release])


def closure(release: str, names) -> list[str]:
    """The names and everything they depend on, as the feed declares it (sorted).

    Names the record does not describe (C libraries of OpenWrt's base feed such as zlib or
    libsqlite3) are kept but not followed.
    """
    packages = load(release)["packages"]
    seen: set = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(packages.get(name, {}).get("depends", ()))
    return sorted(seen)


def _matches(path: str, entry: str) -> bool:
    entry = entry.rstrip("/")
    return path == entry or path.startswith(entry + "/") or fnmatch.fnmatchcase(path, entry)


def _device_path(record: dict, path: str) -> str:
    """A path under any Python's lib/pythonX.Y/ as it lies on the router."""
    stdlib = record["python"]["stdlib_dir"]
    marker = "/lib/python" + record["python"]["major_minor"]
    if path.startswith(stdlib + "/") or path == stdlib:
        return path
    at = path.find(marker + "/")
    if at < 0:
        raise ValueError(f"{path} is not under a lib/python{record['python']['major_minor']}/ folder")
    return stdlib + path[at + len(marker):]


def _owner_of_path(record: dict, path: str) -> str | None:
    python = record["python"]
    path = path.rstrip("/")
    if path.startswith(python["site_packages"] + "/"):
        raise ValueError(f"{path} is in site-packages: a library package's, not the stdlib's")
    if path.endswith(".pyc"):  # byte code lies where its source would
        path = path[:-1]
    packages = record["packages"]
    for name, package in packages.items():
        if name == "python3-light":
            continue
        for entry in package.get("owns", ()):
            # libpython3's lib-dynload/ entry is the empty folder it creates; the modules in
            # it belong to python3-light or to the split package that names them.
            if entry.endswith("/lib-dynload/") and path != entry.rstrip("/"):
                continue
            if _matches(path, entry):
                return name
    if not _matches(path, python["stdlib_dir"]):
        return None
    if any(_matches(path, entry) for entry in packages["python3-light"].get("excludes", ())):
        return None
    if any(_matches(path, entry) for entry in record["stdlib_mapping"]["not_installed"]):
        return None
    return "python3-light"


def owner(release: str, module_file_or_name: str) -> str | None:
    """The OpenWrt package that installs a stdlib file or module, None if none ships it.

    A path may be the router's (/usr/lib/python3.11/...) or any Python's of the same minor
    (.../lib/python3.11/...): it is placed under the router's stdlib folder first. A dotted
    module name is looked up by the files it could be (a.py, a/__init__.py, a's C
    extension); a name compiled into the interpreter (sys, _io, ...) has no file and gives
    python3-light, whose dependencies carry libpython3.
    """
    record = load(release)
    value = module_file_or_name
    if "/" in value:
        return _owner_of_path(record, _device_path(record, value))
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", value):
        raise ValueError(f"{value!r} is neither a path nor a module name")
    stdlib = record["python"]["stdlib_dir"]
    parts = value.split(".")
    candidates = [f"{stdlib}/{'/'.join(parts)}.py", f"{stdlib}/{'/'.join(parts)}/__init__.py"]
    if len(parts) == 1:
        suffix = record["python"]["so_suffix"].replace("*", "any")
        candidates.append(f"{stdlib}/lib-dynload/{value}.{suffix}")
    owners = [_owner_of_path(record, path) for path in candidates]
    # Of the files the name could be, one a split package names decides; else one that
    # is not shipped (idlelib, test) hides the module.
    named = [o for o in owners if o not in (None, "python3-light")]
    if named:
        return named[0]
    return None if None in owners else "python3-light"


# --- deriving the records ---------------------------------------------------------------------

def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def compact(full: dict, release: str) -> dict:
    """One release's record, reduced from feeds.json to what the packaging uses."""
    source = full["releases"][release]
    wanted = {_normal(n) for n in VENDORED + ALSO_RECORDED}
    packages = {}
    for name, package in sorted(source["packages"].items()):
        kind = package["kind"]
        if kind == "library" and _normal(name.removeprefix("python3-")) not in wanted:
            continue
        keep = {key: package[key] for key in ("kind", "version", "release", "pypi", "depends",
                                              "conditional_depends", "owns", "excludes",
                                              "not_in_python3_meta") if key in package}
        packages[name] = keep
    libraries = {}
    for wanted_name in VENDORED:
        found = [n for n, p in packages.items()
                 if p["kind"] == "library" and _normal(p.get("pypi", "")) == _normal(wanted_name)]
        libraries[wanted_name] = found[0] if found else None
    return {
        "about": ("What OpenWrt's packages feed ships for Python at this commit, reduced from a "
                  "read of its Makefiles (lang/python/) to what qlshadow's package uses. "
                  "Derived by scripts/pkgbuild/feeds.py; paths are the router's."),
        "release": release,
        "feed": {"repository": full["repository"], "branch": source["branch"],
                 "commit": source["commit"], "commit_date": source["commit_date"]},
        "python": {key: source["python"][key] for key in
                   ("version", "major_minor", "stdlib_dir", "site_packages", "so_suffix")},
        "stdlib_mapping": source["stdlib_mapping"],
        "caveats": full.get("caveats", []) + source.get("notes", []),
        "bundled_in_feed": libraries,
        "packages": packages,
    }


def derive(feeds_json: str, out_dir: str = FEEDS_DIR) -> list[str]:
    """Write conf/openwrt/feeds/<release>.json for every supported release."""
    with open(feeds_json, encoding="utf-8") as fh:
        full = json.load(fh)
    written = []
    for release in RELEASES:
        path = os.path.join(out_dir, f"{release}.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(compact(full, release), fh, indent=1, sort_keys=False)
            fh.write("\n")
        _cache.pop(release, None)
        written.append(os.path.normpath(path))
    return written


def main(argv: list[str]) -> int:
    usage = __doc__.split("\n\n")[2]
    if len(argv) >= 2 and argv[0] == "derive":
        for path in derive(argv[1], *argv[2:3]):
            print(path)
        return 0
    if len(argv) == 2 and argv[0] == "depends":
        print("\n".join(depends(argv[1])))
        return 0
    if len(argv) >= 3 and argv[0] == "owner":
        for value in argv[2:]:
            print(f"{value} {owner(argv[1], value) or '-'}")
        return 0
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
