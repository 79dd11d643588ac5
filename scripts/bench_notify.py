#!/usr/bin/env python3
"""What alerts cost: the callback with events against a tree without them, and the tick.

  callback  CPU per status callback (running + idle pairs, exit 0, so no state changes)
            and bytes written per callback (/proc/self/io wchar: what reaches the
            filesystem), in this tree and in --baseline REF (a commit before alert events),
            each in its own process on a fresh SQLite file, alternating for --rounds; then
            this tree with every finish changing the state (exit 0, 1, 0, ...), which writes
            an event each time, for comparison.
  tick      CPU of `qlshadow notify` as crond runs it (a whole process: interpreter start,
            imports, the tick), idle (nothing changed), for --crons sizes of crons with
            varied schedules and up to --history Legacy instances each; also without a
            PostgreSQL driver installed (as on a router), with no channel configured, and
            the tick's own work (imports excluded), to show how it grows with crons.

Prints a JSON document. SQLite only: the router's database (PostgreSQL costs the same
statements; the callback's extra is one more column returned).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from bench import child  # noqa: E402



def baseline_path(ref: str, base: str) -> str:
    """A PYTHONPATH that imports qlshadow as of ref (its app/ unpacked under base)."""
    from bench import baseline_env
    return baseline_env(ref, base)["PYTHONPATH"]


def run_driver(pythonpath: str | None, base: str, pairs: int, flip: bool) -> dict:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    os.makedirs(base)
    out = subprocess.run([sys.executable, child("callback_driver"), base, str(pairs),
                          "1" if flip else "0"], env=env, cwd=base, capture_output=True,
                         text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout)


def bench_callback(args, work: str) -> dict:
    old = baseline_path(args.baseline, os.path.join(work, "baseline"))
    runs: dict = {"events": [], "baseline": [], "events_every_finish_changes": []}
    for r in range(args.rounds):
        runs["baseline"].append(run_driver(old, f"{work}/b{r}", args.pairs, False))
        runs["events"].append(run_driver(None, f"{work}/e{r}", args.pairs, False))
    runs["events_every_finish_changes"].append(run_driver(None, f"{work}/f", args.pairs, True))

    def median(name, key):
        return statistics.median(r[key] for r in runs[name])
    summary = {name: {"cpu_us_per_callback": round(median(name, "cpu_us_per_callback"), 1),
                      "bytes_per_callback": round(median(name, "bytes_per_callback"), 1)}
               for name in runs}
    summary["cpu_ratio_events_vs_baseline"] = round(
        median("events", "cpu_us_per_callback") / median("baseline", "cpu_us_per_callback"), 3)
    summary["paired_cpu_ratios"] = [round(e["cpu_us_per_callback"] / b["cpu_us_per_callback"], 3)
                                    for e, b in zip(runs["events"], runs["baseline"],
                                                    strict=True)]
    summary["bytes_ratio_events_vs_baseline"] = round(
        median("events", "bytes_per_callback") / median("baseline", "bytes_per_callback"), 3)
    return summary


# --- the tick ------------------------------------------------------------------------------

def schedule_of(i: int) -> str:
    """Varied schedules, as a router's crons have: every health read works out each one."""
    return (f"*/{2 + i % 10} * * * *", f"{i % 60} * * * *", f"{i % 60} {i % 24} * * *",
            f"{i % 60} {i % 24} * * {i % 7}")[i % 4]


def seed(base: str, crons: int, history: int) -> tuple:
    """A data dir whose crons ran at each of their last `history` firings of the past two
    days; (settings, notify.conf) with a channel to nowhere (an idle tick sends nothing)."""
    import time
    from datetime import datetime

    from cronsim import CronSim

    from qlshadow import config
    from qlshadow.host import crontab
    from qlshadow.storage import db
    from qlshadow.storage.models import Cron, RunningInstance
    settings = config.load(environ={"QL_DATA_DIR": base, "QL_DB_URL": f"sqlite:///{base}/q.db",
                                    "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": ""})
    database, _ = db.open_database(settings)
    now = int(time.time())
    made = now - 2 * 86400
    with database.connection_context(), db.write_transaction():
        for i in range(crons):
            schedule = schedule_of(i)
            fired = []
            for when in CronSim(schedule, datetime.fromtimestamp(made)):
                if when.timestamp() > now - 120:
                    break
                fired.append(int(when.timestamp()))
            cron_id = Cron.insert(name=f"c{i}", command="true", schedule=schedule,
                                  created_at=made, updated_at=made).execute()
            if fired[-history:]:
                RunningInstance.insert_many([
                    {"cron": cron_id, "pid": k, "started_at": t + 1, "finished_at": t + 3,
                     "status": 1, "exit_code": 0}
                    for k, t in enumerate(fired[-history:])]).execute()
    crontab.write_notify_conf(settings, environ={"NTFY_URL": "http://127.0.0.1:9",
                                                 "NTFY_TOPIC": "bench"})
    return settings, os.path.join(base, crontab.NOTIFY_CONF)


def settle(settings) -> None:
    """Mark every delivery sent: what the warm tick found stays alerted, nothing is due."""
    from qlshadow.storage import db
    from qlshadow.storage.models import AlertDelivery
    database, _ = db.open_database(settings, create=False)
    with database.connection_context(), db.write_transaction():
        AlertDelivery.update(outcome="sent").execute()


def child_env(work: str) -> dict:
    """The environment of a tick as installed: bytecode cached (an ipk or pip install ships
    or writes .pyc files; PYTHONDONTWRITEBYTECODE would compile every module every minute),
    no QL_ settings but the conf file's."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("QL_", "QL3_")) and k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(work, "pycache")
    return env


def child_cpu(argv: list, times: int, env: dict, catch_up=None) -> list:
    """CPU seconds (user + system) of each of `times` runs of argv, in ms; catch_up() runs
    before each, uncounted."""
    found = []
    for _ in range(times):
        if catch_up is not None:
            catch_up()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(argv, env=env, check=True, timeout=120, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        found.append(round(1000 * (after.ru_utime - before.ru_utime
                                   + after.ru_stime - before.ru_stime), 1))
    return found


# The tick's own work in a fresh process, its imports excluded: the schedules' firings are
# worked out anew by every tick (crond starts a new process each minute).


def tick_work_ms(conf: str, times: int, env: dict, catch_up) -> float:
    found = []
    for _ in range(times):
        catch_up()
        spent, busy = subprocess.run([sys.executable, child("tick_work"), conf], env=env,
                                     check=True, capture_output=True, text=True,
                                     timeout=120).stdout.split()
        if busy == "0":  # idle only: a firing missed since the catch-up is not
            found.append(float(spent))
    return statistics.median(found)


def bench_tick(args, work: str) -> dict:
    cli = [sys.executable, "-m", "qlshadow.cli"]
    env = child_env(work)
    out = {"history_per_cron": args.history, "by_crons": {}}
    # As on a router, where no PostgreSQL driver is installed (peewee imports one if it is).
    routerlike = [sys.executable, child("routerlike_cli")]
    for crons in args.crons:
        settings, conf = seed(f"{work}/tick{crons}", crons, args.history)

        def catch_up(conf=conf, settings=settings):
            # What came due since (firings pass while this runs: a cron with no record of
            # them turns missed) is recorded and marked sent: the tick measured next is idle.
            subprocess.run(cli + ["--config", conf, "notify"], check=True, timeout=120, env=env)
            settle(settings)
        catch_up()  # and the bytecode cache
        process = child_cpu(cli + ["--config", conf, "notify"], args.ticks, env, catch_up)
        router = child_cpu(routerlike + ["--config", conf, "notify"], args.ticks, env, catch_up)
        kept = os.path.join(os.path.dirname(conf), "notify-firings.json")
        out["by_crons"][crons] = {"firings_file_bytes": os.path.getsize(kept)
                                  if os.path.exists(kept) else 0,
                                  "process_cpu_ms_median": statistics.median(process),
                                  "process_cpu_ms_max": max(process),
                                  "no_pg_driver_process_cpu_ms_median": statistics.median(router),
                                  "tick_work_cpu_ms_median": tick_work_ms(conf, args.ticks, env,
                                                                          catch_up)}
    conf = os.path.join(work, "none.conf")
    with open(conf, "w") as fh:
        fh.write(f'QL_DATA_DIR="{work}/none"\n')
    none = child_cpu(cli + ["--config", conf, "notify"], args.ticks, env)
    out["no_channel_process_cpu_ms_median"] = statistics.median(none)
    floor = child_cpu([sys.executable, "-c", "pass"], args.ticks, env)
    out["python_start_cpu_ms_median"] = statistics.median(floor)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="08f5591",
                        help="a commit before alert events (default: the tree they were added to)")
    parser.add_argument("--pairs", type=int, default=3000, help="running+idle pairs per run")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each tree, alternating")
    parser.add_argument("--crons", type=int, nargs="+", default=[0, 50, 200])
    parser.add_argument("--history", type=int, default=100, help="instances per cron")
    parser.add_argument("--ticks", type=int, default=10, help="tick runs measured per size")
    parser.add_argument("--skip-callback", action="store_true")
    parser.add_argument("--output", help="also write the JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qlshadow-bench-notify-") as work:
        result = {"tick": bench_tick(args, work)}
        if not args.skip_callback:
            result["callback"] = bench_callback(args, work)
    text = json.dumps(result, indent=1)
    print(text)
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
