"""scripts/soak.py in its short mode: it runs, stays clean and reports its figures."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT

# A soak: minutes of load in its long mode, still the slowest fault test in its short one.
pytestmark = [pytest.mark.faults, pytest.mark.slow]

SOAK = os.path.join(ROOT, "scripts", "soak.py")


def run_soak(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
    return subprocess.run([sys.executable, SOAK, *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=180)


def test_a_short_soak_exits_0_and_reports_memory_fds_and_database_size(figures):
    result = run_soak("--duration", "5", "--interval", "1")
    assert result.returncode == 0, result.stderr + result.stdout
    lines = result.stdout.strip().splitlines()
    summary = json.loads(lines[-1])
    interval_lines = [line for line in lines[:-1] if line.startswith("t=")]
    assert len(interval_lines) >= 3
    assert all(f"{key}=" in line for line in interval_lines
               for key in ("callbacks", "errors", "rss_kb", "fds", "db_bytes"))
    assert summary["callbacks"] > 0 and summary["errors"] == 0
    # One Run per answered execution; past 1,000 per cron retention removes the oldest
    # (soak.runs_match checks that per cron).
    assert summary["runs_match"] is True
    cap = summary["clients"] * summary["rows_per_cron"]  # one cron per client
    assert min(summary["executions"], cap) <= summary["runs"] <= summary["executions"]
    for key in ("rss_kb", "fds", "db_bytes"):
        assert summary[key]["max"] > 0 and summary[key]["last"] > 0, key
    figures(**{k: summary[k] for k in ("duration_s", "callbacks", "errors", "runs", "rss_kb",
                                       "fds", "db_bytes", "rate_per_s")})


@pytest.mark.parametrize("backend", ["postgres"])
def test_a_short_soak_on_postgresql_exits_0_and_reports_memory_and_fds(db_url, figures):
    result = run_soak("--duration", "3", "--interval", "1", "--db-url", db_url)
    assert result.returncode == 0, result.stderr + result.stdout
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["callbacks"] > 0 and summary["errors"] == 0
    assert summary["rss_kb"]["max"] > 0 and summary["fds"]["max"] > 0
    assert summary["db_bytes"]["max"] is None  # not measured on PostgreSQL
    figures(**{k: summary[k] for k in ("duration_s", "callbacks", "errors", "rss_kb", "fds",
                                       "rate_per_s")})


def test_the_soak_explains_its_options():
    result = run_soak("--help")
    assert result.returncode == 0
    assert all(option in result.stdout for option in ("--duration", "--interval", "--db-url"))
