#!/usr/bin/env python3
"""What the crontab's tick line costs a minute (docs/ALERTS.md, docs/PERFORMANCE.md).

  line      shell/tick.sh as crond runs it (env -i, sh), service up, a channel configured:
            the CPU of its whole process tree (sh, its subshells, curl: every waited-for
            descendant) plus the server's CPU for the tick it asked for (the server's
            /proc/PID/stat over --ticks ticks, less the same time idle, per tick)
  python    the Python tick the line used to start every minute (`qlshadow --config
            notify.conf notify`, a whole process), on the same data
  fallback  tick.sh when the service does not answer: the line plus the Python tick it then
            starts (which opens the outage)
  none      no channel configured: the block's tick line is a comment (no process at all)

--arch armhf (or mipsel): the server and the Python tick run under qemu-user
(scripts/prepare_32bit.py's userland); the line stays native (without binfmt_misc an
emulated BusyBox cannot start its own applets), so only the service's part and the Python
tick are the emulated figures; the fallback is not measured there.

--crons crons with varied schedules and --history finished instances each, on SQLite, the
channel a loopback port that refuses (an idle tick sends nothing; what the warm-up ticks
found is marked sent). Prints a JSON document; figures are medians, the ratio in one run.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import bench_notify  # noqa: E402
from bench_notify import child_env, seed, settle  # noqa: E402
from harness import Serve, clean_env, free_port  # noqa: E402

TICK = os.path.join(ROOT, "shell", "tick.sh")
CLOCK = os.sysconf("SC_CLK_TCK")
CHANNEL = {"NTFY_URL": "http://127.0.0.1:9", "NTFY_TOPIC": "bench"}


def process_cpu_ms(pid: int) -> float:
    """utime + stime of a whole process (its ended threads included), in ms."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return 1000 * (int(fields[11]) + int(fields[12])) / CLOCK


def children_cpu_ms(argv: list, env: dict | None = None) -> float:
    """CPU (user + system) of argv and every descendant it waited for, in ms."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, env=env, timeout=120, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return 1000 * (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def line_argv(shell: str, data: str) -> list:
    """The crontab line as crond runs it: `sh -c LINE`."""
    return [*shlex_split(shell), "-c", f"QL_DATA_DIR={data} {TICK}"]


class Arch:
    """Where the server and the Python tick run: natively, or under qemu (prepare_32bit)."""

    def __init__(self, arch: str | None, work: str):
        self.arch = arch
        self.prefix: list = []
        self.env: dict = {}
        if arch:
            import prepare_32bit
            path = os.path.join(work, "path")
            os.makedirs(path)
            os.symlink(os.path.join(ROOT, "app"), os.path.join(path, "qlshadow"))
            os.symlink(os.path.join(ROOT, "shell"), os.path.join(path, "shell"))
            self.prefix = prepare_32bit.command(arch)
            self.env = {"PATH": "/usr/bin:/bin", "HOME": work, "LANG": "C.UTF-8",
                        "PYTHONPATH": f"{path}:{prepare_32bit.site_path()}"}

    def cli(self) -> list:
        return [*self.prefix, "-m", "qlshadow.cli"] if self.arch else None


def line_env(url: str, cli: str) -> dict:
    """crond's almost empty environment; the URL and command that runner.env would give."""
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SHELL": "/bin/sh", "QL_BASE_URL": url,
            "QL_CLI": cli}


def hourly_or_daily(i: int) -> str:
    """Varied schedules none of which comes due while the bench runs (a few minutes from a
    whole hour aside), so every measured tick is idle, as most minutes are."""
    return (f"{i % 60} * * * *", f"{i % 60} {i % 24} * * *", f"{i % 60} {i % 24} * * {i % 7}",
            f"{i % 60} {i % 24} {1 + i % 28} * *")[i % 4]


def stored_counts(settings) -> dict:
    from qlshadow.storage import db
    from qlshadow.storage.models import AlertDelivery, AlertEvent
    database, _ = db.open_database(settings, create=False)
    with database.connection_context():
        return {"events": AlertEvent.select().count(), "deliveries": AlertDelivery.select().count()}


def bench(args, work: str) -> dict:
    from qlshadow import config
    from qlshadow.host import crontab
    data = os.path.join(work, "data")
    bench_notify.schedule_of = hourly_or_daily
    settings, conf = seed(data, args.crons, args.history)
    port = free_port()
    env = clean_env({"QL_DATA_DIR": data, "QL_DB_URL": settings.db_url, "QL_SCHEDULER": "node",
                     "QL_CRONTAB_INSTALL": "", "QL_HOST": "127.0.0.1", "QL_PORT": str(port),
                     **CHANNEL})
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(work, "pycache")
    served = config.load(environ=env)
    crontab.prepare_runner(served)  # runner.env and the runner's token, as a cron change does
    cli = crontab.cli_command()
    py_env = child_env(work)
    out: dict = {"crons": args.crons, "history_per_cron": args.history, "shell": args.shell,
                 "arch": args.arch or "native"}
    arch = Arch(args.arch, work)
    serve_argv = None
    if args.arch:
        env = {**env, **arch.env}
        serve_argv = arch.cli() + ["serve"]
        cli = " ".join(arch.cli())
        py_env = {**py_env, **arch.env}
    with Serve(argv=serve_argv, env=env, timeout=300) as server:
        argv, crond_env = line_argv(args.shell, data), line_env(server.url, cli)
        # Warm up: the first ticks find what came due in the seeded history, then settle.
        for _ in range(3):
            children_cpu_ms(argv, crond_env)
            time.sleep(args.wait)
        settle(settings)
        time.sleep(args.wait)
        settled = stored_counts(settings)
        idle_before = process_cpu_ms(server.pid)
        time.sleep(args.wait * args.ticks)
        idle = (process_cpu_ms(server.pid) - idle_before) / args.ticks
        lines, service_before = [], process_cpu_ms(server.pid)
        for _ in range(args.ticks):
            lines.append(children_cpu_ms(argv, crond_env))
            time.sleep(args.wait)  # the service's tick runs after the answer
        service = (process_cpu_ms(server.pid) - service_before) / args.ticks - idle
        out["idle_ticks"] = stored_counts(settings) == settled  # nothing found, nothing sent
        out["line_process_tree_cpu_ms_median"] = round(statistics.median(lines), 2)
        out["line_process_tree_cpu_ms_max"] = round(max(lines), 2)
        out["service_cpu_ms_per_tick"] = round(service, 2)
        out["service_idle_cpu_ms_per_interval"] = round(idle, 2)
        out["line_total_cpu_ms"] = round(statistics.median(lines) + service, 2)
        python = [children_cpu_ms([*shlex_split(cli), "--config", conf, "notify"], py_env)
                  for _ in range(args.ticks)]
        out["python_tick_cpu_ms_median"] = round(statistics.median(python), 1)
    if not args.arch:
        # The service stopped: the line starts the Python tick, which records the outage.
        down = dict(py_env, **line_env(f"http://127.0.0.1:{port}", cli))
        fallback = [children_cpu_ms(line_argv(args.shell, data), down) for _ in range(args.ticks)]
        out["fallback_cpu_ms_median"] = round(statistics.median(fallback), 1)
    crontab.write_notify_conf(settings, environ={})
    out["no_channel_line"] = crontab.notify_line(settings)
    out["ratio_line_total_vs_python_tick"] = round(
        out["line_total_cpu_ms"] / out["python_tick_cpu_ms_median"], 3)
    return out


def shlex_split(text: str) -> list:
    import shlex
    return shlex.split(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crons", type=int, default=20)
    parser.add_argument("--history", type=int, default=100, help="instances per cron")
    parser.add_argument("--ticks", type=int, default=20, help="tick runs measured")
    parser.add_argument("--wait", type=float, default=0.5,
                        help="seconds after each line run for the service's tick")
    parser.add_argument("--shell", default=shutil.which("sh") or "/bin/sh",
                        help="the shell crond runs the line with, as words (default: sh; "
                        "e.g. 'busybox sh')")
    parser.add_argument("--arch", choices=["armhf", "mipsel"],
                        help="run the server and the Python tick under qemu (prepare_32bit.py)")
    parser.add_argument("--output", help="also write the JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qlshadow-bench-tick-") as work:
        result = bench(args, work)
    text = json.dumps(result, indent=1)
    print(text)
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
