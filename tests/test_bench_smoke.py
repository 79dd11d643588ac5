"""scripts/bench.py --smoke: the benchmark harness runs end to end and reports every figure.

Only the shape of the results is checked, never their values: timings on a shared machine
prove nothing in a test suite. The budgets are judged by a full run, by hand.
"""
from __future__ import annotations

import glob
import json
import os
import re
import sqlite3
import subprocess
import sys

import pytest

# Load runs of the bench harness, about a minute together.
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "scripts", "bench.py")
NUMBER = (int, float)

LOAD_FIGURES = {"callbacks": int, "seconds": NUMBER, "callbacks_per_s": NUMBER,
                "p50_ms": NUMBER, "p95_ms": NUMBER, "p99_ms": NUMBER, "errors": int}
SUSTAINED_FIGURES = {**LOAD_FIGURES, "executions": int, "cpu_us_per_callback": NUMBER, "rss_start_kib": int,
                     "rss_end_kib": int, "rss_growth_kib": int, "peak_rss_kib": int,
                     "write_bytes": int, "write_bytes_per_callback": NUMBER}
STORAGE_FIGURES = ("storage_growth_bytes", "storage_growth_per_run")
ROW_FIGURES = ("runs", "exited_runs", "accept_failures", "instances")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """Run the smoke mode once for every test of this file; returns (process, results)."""
    out = tmp_path_factory.mktemp("bench")
    path = out / "bench.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
    pg_url = os.environ.get("QL_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/")
    process = subprocess.run(
        [sys.executable, BENCH, "--smoke", "--json", str(path), "--workdir", str(out),
         "--python", sys.executable, "--pg-url", pg_url, "--design", "ds_page_1024", "--keep"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    results = json.loads(path.read_text()) if path.exists() else None
    if results is not None:
        results["_workdir"] = str(out)  # --keep leaves the databases there
    return process, results


def _servers(results) -> list:
    names = ["floor", "floor_write", "sqlite_off", "sqlite_on"]
    if os.environ.get("QL_REQUIRE_POSTGRES") == "1" or "postgresql" not in results["skipped"]:
        names += ["pg_off", "pg_on"]
    return names


def _check_types(figures: dict, expected: dict) -> list:
    return [key for key, kind in expected.items()
            if isinstance(figures.get(key), bool) or not isinstance(figures.get(key), kind)]


def test_it_exits_zero(smoke):
    process, _ = smoke
    assert process.returncode == 0, process.stderr[-3000:]


def test_it_prints_the_table_and_the_budgets(smoke):
    process, _ = smoke
    assert "sustained callbacks/s" in process.stdout
    assert "Budgets" in process.stdout


def test_it_shows_progress_on_stderr(smoke):
    process, _ = smoke
    assert "[bench" in process.stderr


def test_it_writes_a_write_floor_per_transaction(smoke):
    _, results = smoke
    for key, level in (("write_floor", "full"), ("write_floor_normal", "normal")):
        assert _check_types(results[key], {"transactions": int, "write_bytes": int, "synchronous": str,
                                           "bytes_per_transaction": NUMBER}) == []
        assert results[key]["synchronous"] == level


def test_it_measures_every_server_it_must(smoke):
    _, results = smoke
    missing = [name for name in _servers(results) if name not in results["servers"]]
    assert missing == [], results.get("skipped")


def test_an_unknown_design_point_is_refused():
    process = subprocess.run([sys.executable, BENCH, "--design", "ds_no_such_point"],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert process.returncode == 2 and "invalid choice" in process.stderr


def test_a_design_point_runs_alone_and_gets_its_knobs(smoke):
    # --design runs one point of the design space; its page size needs the database rebuilt.
    _, results = smoke
    assert "ds_page_1024" in results["servers"] and "ds_page_2048" not in results["servers"]
    [path] = glob.glob(os.path.join(results["_workdir"], "qlshadow-bench-*", "ds_page_1024",
                                    "qlshadow.db"))
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA page_size").fetchone()[0] == 1024
        assert conn.execute("SELECT count(*) FROM crons").fetchone()[0] > 0
    finally:
        conn.close()


def test_it_reports_callbacks_beside_slow_work(smoke):
    # A seeded server, crontab installs, gates, pages and prunes beside paced callbacks.
    process, results = smoke
    figures = results["slow_work"]["sqlite_on"]
    assert _check_types(figures, {"callbacks": int, "p50_ms": NUMBER, "p99_ms": NUMBER,
                                  "max_ms": NUMBER, "over_1s": int, "installs": int,
                                  "gates": int, "pages": int, "prunes": int,
                                  "errors": int}) == []
    assert figures["callbacks"] > 0 and figures["installs"] > 0, figures
    assert set(figures["answered_inside"]) == {"installs", "gates", "pages", "prunes"}
    assert "Callbacks beside slow work" in process.stdout


def test_it_reports_start_up_and_idle_memory_of_every_server(smoke):
    _, results = smoke
    bad = {name: _check_types(results["servers"][name],
                              {"startup_s": NUMBER, "idle_rss_kib": int, "startup_all_s": list})
           for name in _servers(results)}
    assert bad == {name: [] for name in bad}


def test_it_reports_the_burst_of_every_server(smoke):
    _, results = smoke
    bad = {name: _check_types(results["servers"][name]["burst"],
                              {**LOAD_FIGURES, "peak_rss_kib": int})
           for name in _servers(results)}
    assert bad == {name: [] for name in bad}


def test_it_reports_the_sustained_run_of_every_server(smoke):
    _, results = smoke
    bad = {name: _check_types(results["servers"][name]["sustained"], SUSTAINED_FIGURES)
           for name in _servers(results)}
    assert bad == {name: [] for name in bad}


def test_it_reports_storage_growth_of_every_product_server(smoke):
    _, results = smoke
    bad = {name: [key for key in STORAGE_FIGURES
                  if not isinstance(results["servers"][name]["sustained"][key], NUMBER)]
           for name in _servers(results) if not name.startswith("floor")}
    assert bad == {name: [] for name in bad}


def test_it_counts_the_rows_each_product_server_stored(smoke):
    _, results = smoke
    bad = {name: [key for key in ROW_FIGURES
                  if not isinstance((results["servers"][name]["rows"] or {}).get(key), int)]
           for name in _servers(results) if not name.startswith("floor")}
    assert bad == {name: [] for name in bad}


def test_it_judges_every_budget_as_a_ratio(smoke):
    _, results = smoke
    budgets = results["budgets"]
    assert len(budgets) == 9
    assert all(isinstance(b["value"], NUMBER) and isinstance(b["limit"], NUMBER)
               and isinstance(b["pass"], bool) and b["op"] in ("<=", ">=") for b in budgets)


def test_it_reports_the_references_as_ratios(smoke):
    _, results = smoke
    references = results["references"]
    assert references
    assert all(isinstance(r["figure"], str) and isinstance(r["value"], NUMBER) for r in references)


def test_it_describes_the_machine(smoke):
    _, results = smoke
    machine = results["machine"]
    assert isinstance(machine["nproc"], int)
    assert all(isinstance(machine[k], str) and machine[k] for k in ("cpu", "python", "sqlite"))


def test_the_guarantee_costs_script_reports_each_cost():
    # Tiny batches: checks the script runs and names every figure, not their values.
    process = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "guarantee_costs.py"),
         "--callbacks", "20", "--repeats", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert process.returncode == 0, process.stderr
    for figure in ("with the savepoint", "without it", "metrics on", "metrics off",
                   "savepoint cost", "metrics on / off", "one-row update"):
        assert figure in process.stdout, process.stdout


def test_the_guarantee_costs_script_counts_wal_frames_by_table():
    process = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "guarantee_costs.py"),
         "--callbacks", "20", "--repeats", "1", "--frames"],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert process.returncode == 0, process.stderr
    running = {}
    for block in process.stdout.split("WAL frames per callback, ")[1:]:
        kind = block.split(" (", 1)[0]
        line = re.search(r"running\s+([\d.]+)\s+\(([^)]*)\)", block)
        running[kind] = (float(line.group(1)),
                         {name: float(n) for name, n in re.findall(r"(\S+) ([\d.]+)", line.group(2))})
    assert set(running) == {"Shadow on", "Legacy only"}, process.stdout
    legacy, shadow = running["Legacy only"][1], running["Shadow on"][1]
    # A running callback writes its cron's page either way; Shadow adds the Run's pages.
    assert legacy["crons"] == 1.0 and shadow["crons"] == 1.0
    assert shadow["shadow_runs"] >= 1.0
    assert not any(name.startswith("shadow_runs") for name in legacy)
    assert running["Shadow on"][0] > running["Legacy only"][0]


def test_the_page_bench_reports_memory_per_page_and_the_counters_ratio(tmp_path):
    # Tiny counts: the script runs both parts and reports every figure, not their values.
    process = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "bench_page.py"), "--python", sys.executable,
         "--callbacks", "40", "--clients", "2", "--rounds", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
        env={k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))})
    assert process.returncode == 0, process.stderr
    memory, counters = (json.loads(line) for line in process.stdout.splitlines())
    pages = memory["memory"]["rss_kib_after_first_page_of_kind"]
    assert set(pages) == {"signed in", "crons", "crons page 2", "gate", "health", "login", "cron"}
    assert memory["memory"]["pages_loaded"] == 55
    assert all(isinstance(rss, int) and rss > 0 for _, rss in pages.values())
    # The floor runs in the same invocation, and every memory figure is given as its ratio.
    floor = memory["memory"]["floor"]
    assert floor["peak_kib"] >= floor["idle_rss_kib"] > 0
    assert set(memory["memory"]["ratios"]) == {
        "idle / floor idle", "peak, page never loaded / floor peak",
        "peak after every page / floor peak", "peak after more callbacks / floor peak"}
    assert all(0.5 < ratio < 5 for ratio in memory["memory"]["ratios"].values())
    assert counters["counters"]["ratio_on_over_off"] > 0


def test_the_run_shapes_script_counts_what_each_index_writes():
    process = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "run_shapes.py"),
         "--waves", "8", "--crons", "40", "--rows", "200", "500", "--page-sizes", "4096"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert process.returncode == 0, process.stderr
    rows = {}
    for insert, finish, size, name in re.findall(
            r"([\d.]+) \(\s*\d+ B\) insert\s+([\d.]+) \(\s*\d+ B\) finish\s+(\d+)-byte rows"
            r"\s+4096 B pages  (.+)", process.stdout):
        rows[(name.split(" [")[0].split(" (a bound")[0], int(size))] = (float(insert), float(finish))
    assert len(rows) == 8, process.stdout
    shipped = "key (accepted_at, id), index (cron_id, accepted_at, id)"
    bare = "key (accepted_at, id), no index"
    for size in (200, 500):
        # every insert writes at least its leaf, and the index a page more
        assert rows[(bare, size)][0] >= 1.0
        assert rows[(shipped, size)][0] > rows[(bare, size)][0] + 0.5
        assert rows[(shipped, size)][1] >= 1.0  # a finish rewrites the Run's page
    # fatter rows split pages more often
    assert rows[(shipped, 500)][0] > rows[(shipped, 200)][0]


def test_the_shadow_bound_script_replays_each_case_and_writes_more_for_each_index():
    process = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "shadow_bound.py"),
         "--waves", "1", "--repeats", "1", "--off-us", "281"],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert process.returncode == 0, process.stderr
    rows = {}
    for line in process.stdout.splitlines():
        found = re.match(r"  (\S.*?)\s+([\d.]+)\s+([\d.]+)\s+(\d+)(?:\s+(-?[\d.]+))?", line)
        if found:
            rows[found.group(1)] = int(found.group(4))  # bytes written per callback
    assert set(rows) == {"legacy", "row", "row+savepoint", "row+sp+cron index",
                         "row+sp+index, 320 B", "row+sp+index, 520 B", "product, appended",
                         "product", "product in-process, Shadow on",
                         "product in-process, Legacy only"}, process.stdout
    # Bytes written are counted, not timed: each step of the Run writes pages of its own.
    assert rows["row"] > rows["legacy"]
    assert rows["row+sp+cron index"] > rows["row+savepoint"]
    # On the product's 1 KiB pages both rows spill into overflow pages (docs/STORAGE.md).
    assert rows["row+sp+index, 520 B"] >= rows["row+sp+index, 320 B"] > rows["row+sp+cron index"]
    assert rows["product"] > rows["row+sp+cron index"]
    assert rows["product in-process, Shadow on"] > rows["product in-process, Legacy only"]
    kept_line = process.stdout.split("Runs kept after the replays: ")[1].splitlines()[0]
    kept = dict(part.split(": ") for part in kept_line.split(" (of ")[0].split("; "))
    executions = int(re.search(r"\(of (\d+) executions", kept_line).group(1))
    assert int(kept["row"]) == int(kept["row+sp+index, 520 B"]) == executions
    assert 0 < int(kept["product"]) == int(kept["product, appended"]) <= executions
