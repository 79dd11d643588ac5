#!/usr/bin/env python3
"""The OpenWrt package's forms side by side: package size, install closure, and start-up.

Each form is a staging of scripts/pkgbuild (stage()'s code=, blank=, trim=) with a way of
running it; for each: the gzip -9 tar of our package for 24.10 and 25.12, the install
closure of each release (the feed's Python packages the package declares and what they pull,
measured as scripts/bench_closure.py does, plus ours), and, for 24.10's tree on emulated
armhf (qemu user mode, Debian's python3.11, prepared by scripts/prepare_32bit.py), the time
of `qlshadow serve` to its "qlshadow serving" line and of `qlshadow notify` with no channel
set (crond runs it every minute). Forms that keep byte code in a cache get one untimed run
first, so their times are the steady state; the first, compiling run is printed apart.

  old      the package before: sources, Python writing __pycache__ beside them (flash)
  a        sources, -B: compiled in memory on every start, nothing written
  b        sources and their byte code (__pycache__, hash-checked), -B
  c        sourceless byte code (legacy x.pyc, as OpenWrt's own Python packages)
  d        (c) with docstrings stripped (AST; asserts kept)
  e        (d) without the bundled modules nothing imports (bundled.txt ~PATH)
  ram      sources, docstrings and comments blanked (lines kept), (e)'s leave-outs, byte
           code cached in RAM (/tmp) by the wrapper: as shipped

Every form runs the bootstrap that stands in for python3-codecs (f); the closure is given
with and without python3-codecs. Median (fastest) of N runs on a shared machine: compare
the rows, do not quote one alone.

    .venv/bin/python scripts/bench_package_start.py [--runs 3] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_closure  # noqa: E402
import prepare_32bit  # noqa: E402  (scripts/ is not a package)
from harness import Serve  # noqa: E402
from pkgbuild import feeds, stage  # noqa: E402

# name: (stage() keywords, byte code cache: None for -B, "lib" beside the sources, "ram")
FORMS = {
    "old": (dict(code="sources", blank=False, trim=False), "lib"),
    "a": (dict(code="sources", blank=False, trim=False), None),
    "b": (dict(code="sources+bytecode", blank=False, trim=False), None),
    "c": (dict(code="bytecode", blank=False, trim=False), None),
    "d": (dict(code="bytecode", blank=True, trim=False), None),
    "e": (dict(code="bytecode", blank=True, trim=True), None),
    "ram": (dict(code="sources", blank=True, trim=True), "ram"),
}
CODECS = "python3-codecs"


def _python_script(folder: str, drop_b: bool) -> str:
    """A python3 stand-in running the emulated armhf python3.11 (the wrapper's QL_PYTHON);
    drop_b: without the wrapper's -B, as the package before ran Python."""
    path = os.path.join(folder, "python3-keep" if drop_b else "python3")
    argv = " ".join(f"'{a}'" for a in prepare_32bit.command("armhf"))
    drop = 'if [ "$1" = -B ]; then shift; fi\n' if drop_b else ""
    with open(path, "w") as fh:
        fh.write(f'#!/bin/sh\n{drop}exec {argv} "$@"\n')
    os.chmod(path, 0o755)
    return path


def _time_command(tree: str, env: dict, *args: str) -> float:
    start = time.monotonic()
    subprocess.run([tree + "/usr/bin/qlshadow", *args], env=env, check=True,
                   stdout=subprocess.DEVNULL, timeout=300)
    return time.monotonic() - start


def _time_serve(tree: str, env: dict, log: str) -> float:
    start = time.monotonic()
    with Serve([tree + "/usr/bin/qlshadow", "serve"], env=env, cwd=os.getcwd(), log_path=log,
               timeout=300, grace=60):
        return time.monotonic() - start


def python_parts(work: Path) -> dict:
    """release -> (compressed bytes of the declared feed packages' closure, of python3-codecs)."""
    parts = {}
    for release in feeds.RELEASES:
        python = bench_closure.release_python(release)
        if python is None:
            raise SystemExit(f"bench_package_start: no Python of OpenWrt {release}'s minor under "
                             f"{bench_closure.PYENV}")
        record = feeds.load(release)
        wanted = {n for n in feeds.closure(release, [*feeds.depends(release), CODECS])
                  if n in record["packages"]}
        folders = bench_closure.stage_python_parts(release, python, wanted, work / release)
        sizes = {n: bench_closure.tree_sizes(f)[0] if f.exists() else 0 for n, f in folders.items()}
        declared = {n for n in feeds.closure(release, feeds.depends(release)) if n in sizes}
        parts[release] = (sum(sizes[n] for n in declared), sizes[CODECS])
    return parts


def measure(runs: int, forms: list) -> dict:
    reason = prepare_32bit.missing()
    if reason:
        raise SystemExit(f"bench_package_start: {reason}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        parts = python_parts(work / "feed")
        pythons = {drop: _python_script(tmp, drop) for drop in (False, True)}
        for name in forms:
            form, cache = FORMS[name]
            row: dict = {}
            for release in feeds.RELEASES:
                tree = work / name / release
                stage.stage(tree, release, **form)
                compressed, unpacked = bench_closure.tree_sizes(tree)
                fixed, codecs = parts[release]
                row[release] = {"package_bytes": compressed, "unpacked_bytes": unpacked,
                                "closure_bytes": fixed + compressed,
                                "closure_with_codecs_bytes": fixed + codecs + compressed}
            tree = str(work / name / "24.10")
            cache_dir = str(work / name / "pycache")
            env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": tmp,
                   "QL_PYTHON": pythons[cache == "lib"], "QL_HOST": "127.0.0.1", "QL_PORT": "0",
                   "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": "",
                     "QL_PYCACHE_DIR": cache_dir if cache == "ram" else ""}
            times: dict = {"serve": [], "notify": []}
            for run in range(runs + (cache is not None)):
                env["QL_DATA_DIR"] = str(work / name / f"data-{run}")
                serve = _time_serve(tree, env, str(work / "serve.log"))
                notify = _time_command(tree, env, "notify")
                if cache is not None and run == 0:
                    row["first_run_s"] = {"serve": serve, "notify": notify}
                    continue
                times["serve"].append(serve)
                times["notify"].append(notify)
            if cache == "ram":
                # The package's byte code only: emulated Debian's stdlib has sources, so it is
                # cached there too, where OpenWrt's stdlib ships sourceless byte code.
                ours = Path(cache_dir + tree + stage.LIB)
                row["ram_cache_bytes"] = sum(p.stat().st_size for p in ours.rglob("*")
                                             if p.is_file())
            row.update({f"{k}_s": {"median": statistics.median(v), "min": min(v)}
                        for k, v in times.items()})
            results[name] = row
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--form", action="append", choices=list(FORMS),
                        help="a form to measure (repeatable; default: all)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = measure(args.runs, args.form or list(FORMS))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(report(results, args.runs))
    return 0


def report(results: dict, runs: int) -> str:
    lines = []
    budget = bench_closure.BUDGET["24.10"]
    lines.append(f"Emulated armhf (qemu, Debian python3.11) runs 24.10's tree; median (fastest) of "
                 f"{runs} runs. Closure budget (24.10): {budget:,} B.")
    lines.append("| form | package 24.10 | package 25.12 | closure 24.10 | closure 25.12 "
          "| + python3-codecs (24.10) | serve to start line | notify |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        old, new = r["24.10"], r["25.12"]
        cells = [f"{r[k]['median']:.2f} s ({r[k]['min']:.2f})" for k in ("serve_s", "notify_s")]
        lines.append(f"| {name} | {old['package_bytes']:,} B | {new['package_bytes']:,} B "
              f"| {old['closure_bytes']:,} B | {new['closure_bytes']:,} B "
              f"| {old['closure_with_codecs_bytes']:,} B | {' | '.join(cells)} |")
    for name, r in results.items():
        if "first_run_s" in r:
            first = r["first_run_s"]
            extra = (f", byte code cached in RAM {r['ram_cache_bytes']:,} B"
                     if "ram_cache_bytes" in r else "")
            lines.append(f"{name}: first run (compiling) serve {first['serve']:.2f} s, "
                         f"notify {first['notify']:.2f} s{extra}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
