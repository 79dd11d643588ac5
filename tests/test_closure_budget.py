"""The install closure's budget (docs/PERFORMANCE.md, "OpenWrt install closure"): the .ipk
scripts/build-ipk.sh builds, with every feed package it declares and what they pull, is at
most 6 MB compressed on 24.10, as scripts/bench_closure.py measures it. A library added to
conf/openwrt/bundled.txt or a split stdlib package added to the depends fails here, not
on a 16 MB router."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))
from pkgbuild import feeds  # noqa: E402

BUDGET_24_10 = 6_000_000  # bytes, compressed, before the C libraries of the base feed


@pytest.mark.slow  # builds the package and measures the feed's Python parts: about 30 s
def test_the_built_ipk_and_what_it_pulls_stay_within_6_mb_on_24_10(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("SOURCE_DATE_EPOCH", "QL_PACKAGE_RELEASE")}
    env["PYTHON"] = sys.executable
    built = subprocess.run(["sh", os.path.join(ROOT, "scripts", "build-ipk.sh"), str(tmp_path)],
                           env=env, capture_output=True, text=True, timeout=180)
    assert built.returncode == 0, built.stderr
    package = built.stdout.strip().splitlines()[-1]
    bench = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench_closure.py"),
                            "--release", "24.10", "--package", package, "--json"],
                           capture_output=True, text=True, timeout=300)
    assert bench.returncode == 0, bench.stderr

    [report] = json.loads(bench.stdout)
    rows = {row["package"].split()[0]: row for row in report["rows"]}
    assert rows["qlshadow"]["compressed"] == os.path.getsize(package)
    assert set(feeds.depends("24.10")) <= set(rows)
    assert report["budget"] == BUDGET_24_10
    assert report["total"] <= BUDGET_24_10, json.dumps(report["rows"], indent=1)
