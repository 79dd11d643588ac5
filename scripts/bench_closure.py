"""What installing qlshadow costs a router: the compressed size of its install closure.

    .venv/bin/python scripts/bench_closure.py [--release 24.10] [--package FILE_OR_TREE] [--json]

For each OpenWrt release (conf/openwrt/feeds/): our package, the feed packages it declares
(scripts/pkgbuild/feeds.py depends) and everything they depend on, one row each, summed
and held against the budget (24.10: at most 6 MB compressed).

How each part is measured, as the feed would build it:
- the Python packages (libpython3, python3-base, python3-light and the split stdlib
  packages): the files each owns per the feed record, taken from an interpreter of the
  release's minor version (pyenv's; QL_TEST_PYENV), .py compiled to the legacy .pyc the
  feed installs instead of sources, native code stripped; then a `gzip -9` tar. Native
  code is this machine's (x86_64), larger than MIPS or ARM builds;
- our package: FILE as is (an .ipk or .apk), a TREE tarred the same way, else the tree
  scripts/pkgbuild stages;
- C libraries of OpenWrt's base feed (zlib, libsqlite3, libffi, ...) are listed, not
  counted, as in /work/shared/openwrt/README.md's measurements.
"""
from __future__ import annotations

import argparse
import glob
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from pkgbuild import feeds, stage  # noqa: E402

PYENV = os.environ.get("QL_TEST_PYENV", "/root/.pyenv/versions")
BUDGET = {"24.10": 6_000_000}
# Not built by the feed: CPython's test modules (--disable-test-modules) and Tk.
NOT_BUILT_DIRS = ("test", "tests", "idle_test")
NOT_BUILT_EXTENSIONS = ("_test", "_ctypes_test", "_xxtestfuzz", "xxlimited", "xxsubtype",
                        "_tkinter")


def release_python(release: str) -> str | None:
    minor = feeds.load(release)["python"]["major_minor"]
    found = sorted(glob.glob(os.path.join(PYENV, f"{minor}.*", "bin", f"python{minor}")))
    return found[-1] if found else None


# --- our package ---------------------------------------------------------------------------

def _copy(src: str, dst: Path, mode: int = 0o644) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)  # with its mtime: byte code records it, so sizes repeat exactly
    os.chmod(dst, mode)


def package_tree(dest: Path, release: str, **form) -> Path:
    """The package's tree for a release as scripts/pkgbuild stages it (form: stage()'s code=,
    blank=, trim=)."""
    stage.stage(dest, release, **form)
    return dest


# --- sizes ----------------------------------------------------------------------------------

def tree_sizes(tree: Path) -> tuple[int, int]:
    """(gzip -9 tar bytes, unpacked bytes) of a folder, as a package's data archive."""
    buffer = io.BytesIO()
    unpacked = 0
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=9, mtime=0) as zipped:
        with tarfile.open(fileobj=zipped, mode="w", format=tarfile.GNU_FORMAT) as tar:
            for folder, dirs, names in os.walk(tree):
                dirs.sort()
                for name in sorted(names):
                    path = os.path.join(folder, name)
                    info = tar.gettarinfo(path, os.path.relpath(path, tree))
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    info.mtime = 0
                    unpacked += info.size
                    with open(path, "rb") as fh:
                        tar.addfile(info, fh)
    return len(buffer.getvalue()), unpacked


def _not_built(rel: str) -> bool:
    parts = rel.split("/")
    if any(p in NOT_BUILT_DIRS for p in parts[:-1]) or "__pycache__" in parts:
        return True
    return parts[0] == "lib-dynload" and parts[-1].startswith(NOT_BUILT_EXTENSIONS)


def stage_python_parts(release: str, python: str, wanted: set, work: Path) -> dict:
    """Lay out each wanted Python package's files under work/<package>, as the feed
    installs them (byte code, stripped native code); returns {package: folder}."""
    record = feeds.load(release)
    device_stdlib = record["python"]["stdlib_dir"]
    minor = record["python"]["major_minor"]
    stdlib = subprocess.run([python, "-I", "-S", "-c", "import sys; print(sys._stdlib_dir)"],
                            capture_output=True, text=True, check=True).stdout.strip()
    prefix = os.path.dirname(os.path.dirname(stdlib))
    folders = {name: work / name for name in wanted}
    for folder, dirs, names in os.walk(stdlib):
        dirs[:] = [d for d in dirs if d not in ("site-packages", "__pycache__")]
        for name in names:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, stdlib)
            if _not_built(rel):
                continue
            owner = feeds.owner(release, path)
            if owner in wanted:
                _copy(path, folders[owner] / (device_stdlib + "/" + rel).lstrip("/"))
    extras = {"python3-base": [(f"{prefix}/bin/python{minor}", f"usr/bin/python{minor}")],
              "libpython3": [(f"{prefix}/lib/libpython{minor}.so.1.0",
                              f"usr/lib/libpython{minor}.so.1.0")]}
    for package, pairs in extras.items():
        if package in wanted:
            for src, dst in pairs:
                _copy(src, folders[package] / dst, 0o755)
    for folder in folders.values():
        if not folder.exists():
            continue
        # The feed compiles with compileall -b (x.pyc beside x.py) and ships no sources.
        subprocess.run([python, "-I", "-S", "-m", "compileall", "-q", "-b", "-s", str(folder),
                        "-p", "/", str(folder)], check=True, stdout=subprocess.DEVNULL)
        for path in folder.rglob("*"):
            if path.suffix == ".py" and path.with_suffix(".pyc").exists():
                path.unlink()
            elif path.is_file() and (path.suffix == ".so" or ".so." in path.name or
                                     path.name == f"python{minor}"):
                subprocess.run(["strip", "--strip-unneeded", str(path)], check=True)
    return folders


def measure(release: str, package: str | None) -> dict:
    record = feeds.load(release)
    declared = feeds.depends(release)
    closure = feeds.closure(release, declared)
    described = {n for n in closure if n in record["packages"]}
    python = release_python(release)
    if python is None:
        raise SystemExit(f"bench_closure: no Python {record['python']['major_minor']} under "
                         f"{PYENV} (set QL_TEST_PYENV) to measure OpenWrt {release}'s parts")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if package and os.path.isfile(package):
            ours = (os.path.getsize(package), None, os.path.basename(package))
        else:
            if package:
                tree, source = Path(package), f"tree {package}"
            else:
                tree, source = package_tree(work / "qlshadow", release), "scripts/pkgbuild staged tree"
            ours = (*tree_sizes(tree), source)
        rows.append({"package": "qlshadow", "compressed": ours[0], "unpacked": ours[1],
                     "why": f"ours: {ours[2]}"})
        folders = stage_python_parts(release, python, described, work / "feed")
        for name in sorted(described, key=lambda n: (n not in declared, n)):
            compressed, unpacked = tree_sizes(folders[name]) if folders[name].exists() else (0, 0)
            why = "declared" if name in declared else "pulled by " + ", ".join(
                sorted(p for p in closure if name in record["packages"].get(p, {}).get("depends", ())))
            rows.append({"package": f"{name} {record['packages'][name]['version']}",
                         "compressed": compressed, "unpacked": unpacked, "why": why})
    total = sum(r["compressed"] for r in rows)
    return {"release": release, "python": record["python"]["version"],
            "feed_commit": record["feed"]["commit"], "measured_with": python, "rows": rows,
            "not_counted": sorted(set(closure) - described), "total": total,
            "budget": BUDGET.get(release)}


def table(result: dict) -> str:
    lines = [f"OpenWrt {result['release']} (Python {result['python']}, feed "
             f"{result['feed_commit'][:7]}; parts measured with {result['measured_with']})",
             "| package | compressed | unpacked | why |", "|---|---:|---:|---|"]
    for row in result["rows"]:
        unpacked = f"{row['unpacked']:,} B" if row["unpacked"] is not None else "-"
        lines.append(f"| {row['package']} | {row['compressed']:,} B | {unpacked} | {row['why']} |")
    verdict = ""
    if result["budget"]:
        ok = result["total"] <= result["budget"]
        verdict = f" — budget {result['budget']:,} B: {'within' if ok else 'OVER'}"
    lines.append(f"| **closure** | **{result['total']:,} B** | | before C libraries{verdict} |")
    lines.append("C libraries not counted: " + ", ".join(result["not_counted"]))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--release", action="append", choices=feeds.RELEASES,
                        help="a release to measure (repeatable; default: all)")
    parser.add_argument("--package", help="our package: an .ipk/.apk file or a staged tree")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)
    results = [measure(release, args.package) for release in args.release or feeds.RELEASES]
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        print("\n\n".join(table(r) for r in results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
