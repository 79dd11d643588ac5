#!/usr/bin/env python3
"""Start-up and size of the OpenWrt package's tree: sources (as shipped) against byte code.

Stages the 24.10 tree twice with scripts/pkgbuild (once as shipped, with the sources, once
compiled to sourceless byte code for Python 3.11), then runs each tree's /usr/bin/qlshadow
on emulated armhf (Debian's python3.11 under qemu user mode, prepared by
scripts/prepare_32bit.py) and times `qlshadow --help`, `qlshadow notify` (crond runs it
every minute) and `qlshadow serve` up to its "qlshadow serving" line. The wrapper passes
-B, so the sources tree compiles every module it imports on every start and writes nothing.
Prints each tree's gzip -9 tar size and the median and fastest of N runs (qemu on a shared
machine: compare the two, do not quote one alone).

    .venv/bin/python scripts/bench_package_start.py [--runs 5] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import prepare_32bit  # noqa: E402  (scripts/ is not a package)
from harness import Serve  # noqa: E402
from pkgbuild import ipk, stage  # noqa: E402


def _python_script(folder: str) -> str:
    """A python3 stand-in that runs the emulated armhf python3.11 (the wrapper's QL_PYTHON)."""
    path = os.path.join(folder, "python3")
    argv = " ".join(f"'{a}'" for a in prepare_32bit.command("armhf"))
    with open(path, "w") as fh:
        fh.write(f'#!/bin/sh\nexec {argv} "$@"\n')
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


def measure(runs: int) -> dict:
    reason = prepare_32bit.missing()
    if reason:
        raise SystemExit(f"bench_package_start: {reason}")
    results = {}
    with tempfile.TemporaryDirectory() as work:
        python = _python_script(work)
        for name, bytecode in (("byte code", True), ("sources, -B", False)):
            tree = os.path.join(work, name.split()[0])
            os.mkdir(tree)
            stage.stage(tree, "24.10", bytecode=bytecode)
            size = len(ipk._tar_gz(ipk.tree_members(tree), 0))
            times: dict = {"help": [], "notify": [], "serve": []}
            for run in range(runs):
                data = os.path.join(work, f"data-{run}")
                shutil.rmtree(data, ignore_errors=True)
                env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": work,
                       "QL_PYTHON": python, "QL_DATA_DIR": data, "QL_HOST": "127.0.0.1",
                       "QL_PORT": "0", "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": ""}
                times["help"].append(_time_command(tree, env, "--help"))
                times["serve"].append(_time_serve(tree, env, os.path.join(work, "serve.log")))
                times["notify"].append(_time_command(tree, env, "notify"))
            results[name] = {"tar_gz_bytes": size, **{
                f"{key}_s": {"median": statistics.median(values), "min": min(values)}
                for key, values in times.items()}}
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = measure(args.runs)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"OpenWrt 24.10 tree on emulated armhf (qemu, Debian python3.11), {args.runs} runs")
    print("| tree | gzip -9 tar | --help | notify | serve to its start line |")
    print("|---|---:|---:|---:|---:|")
    for name, r in results.items():
        cells = [f"{r[k]['median']:.2f} s ({r[k]['min']:.2f})"
                 for k in ("help_s", "notify_s", "serve_s")]
        print(f"| {name} | {r['tar_gz_bytes']:,} B | {' | '.join(cells)} |")
    print("median (fastest) of the runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
