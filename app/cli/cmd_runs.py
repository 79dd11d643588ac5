"""Executions: `runs` (Shadow Runs, or Legacy instances) and `accept-failures`."""
from __future__ import annotations

import sys

from qlshadow.cli.common import cron_id_of, cron_names, load_settings, open_db, print_json
from qlshadow.cli.errors import CliError
from qlshadow.cli.textout import Column, table, terminal_width, took, when
from qlshadow.core.shadow import reader
from qlshadow.parse import INT64_MAX, to_int
from qlshadow.service import crons


# RunningInstance.status codes as words (3: exited with a non-zero code), in code order.
INSTANCE_STATES = ("running", "finished", "stopped", "failed")


def _took(start, end) -> str | None:
    return took(end - start) if start is not None and end is not None else None


def _runs_table(listed: list, names: dict, utc: bool) -> str:
    columns = [Column("run"), Column("cron", right=True), Column("name", shrink=True),
               Column("started"), Column("state"), Column("exit", right=True),
               Column("took", right=True)]
    rows = [[r["id"], r["cron_id"], names.get(r["cron_id"]), when(r["accepted_at"], utc),
             _RUN_WORDS.get(r.get("condition"), r["state"]), r["exit_code"],
             _took(r["attempt"]["started_at"] or r["accepted_at"], r["finished_at"])]
            for r in listed]
    return table(columns, rows, terminal_width())


# A Run's state column: the word every surface gives it (watch/health/conditions.py).
_RUN_WORDS = {"running": "running", "stuck": "stuck", "finish_lost": "finish lost",
              "exited": "exited"}
# `runs --state` of Runs: the stored states, and the open Runs' conditions (running is the
# condition: an open Run within its time; stuck and finish_lost the others).
RUN_STATE_CHOICES = ("accepted", "spawned", "running", "stuck", "finish_lost", "exited")


_OPEN_PAGE = 256  # open Runs read at a time while looking for those of one condition


def _list_runs(args, settings) -> list:
    """Runs newest first, each with its condition; --state running, stuck or finish_lost
    keeps the open Runs of that condition (pages of open Runs read until enough match)."""
    import time

    from qlshadow.host.crond import kind_for
    from qlshadow.watch.health import with_conditions
    now, shadow, daemon = int(time.time()), settings.shadow_on, kind_for(settings)
    if args.state not in ("running", "stuck", "finish_lost"):
        listed = reader.list_runs(args.cron, args.state, args.limit, args.before,
                                  since=args.since, until=args.until, failed=args.failed,
                                  host=args.host)
        return with_conditions(listed, now, shadow, daemon)
    found, before = [], args.before
    while len(found) < args.limit:
        page = reader.list_runs(args.cron, "running", _OPEN_PAGE, before, since=args.since,
                                until=args.until, failed=args.failed, host=args.host)
        found += [r for r in with_conditions(page, now, shadow, daemon)
                  if r["condition"] == args.state]
        if len(page) < _OPEN_PAGE:
            break
        before = page[-1]["id"]
    return found[:args.limit]


def _instance_state(code: int) -> str:
    return INSTANCE_STATES[code] if 0 <= code < len(INSTANCE_STATES) else str(code)


def _instances_table(listed: list, names: dict, utc: bool) -> str:
    columns = [Column("instance", right=True), Column("cron", right=True),
               Column("name", shrink=True), Column("started"), Column("state"),
               Column("exit", right=True), Column("took", right=True)]
    rows = [[r["id"], r["cron_id"], names.get(r["cron_id"]), when(r["started_at"], utc),
             _instance_state(r["status"]), r["exit_code"], _took(r["started_at"], r["finished_at"])]
            for r in listed]
    return table(columns, rows, terminal_width())


def _with_hosts(text: str, listed: list) -> str:
    """The table with a host column when the rows ran on more than one host (a fleet)."""
    if len({r.get("host") for r in listed}) < 2:
        return text
    lines = text.splitlines()
    width = max(len(str(r.get("host") or "-")) for r in listed + [{"host": "host"}])
    head, rows = lines[:len(lines) - len(listed)], lines[len(lines) - len(listed):]
    out = [f"{line}  {'host' if i == len(head) - 1 else '':<{width}}".rstrip()
           for i, line in enumerate(head)]
    out += [f"{line}  {r.get('host') or '-'}" for line, r in zip(rows, listed, strict=True)]
    return "".join(f"{line}\n" for line in out)


def cmd_runs(args) -> int:
    """Executions newest first: Shadow Runs when Shadow is on, else (or --legacy) instances."""
    settings = load_settings(args)
    legacy = args.legacy or not settings.shadow_on
    states = INSTANCE_STATES if legacy else RUN_STATE_CHOICES
    kind = "Legacy instances" if legacy else "Shadow Runs"
    if args.state is not None and args.state not in states:
        raise CliError(f"--state {args.state!r} is not a state of {kind}; use one of "
                       + ", ".join(states))
    if args.before is not None:
        if legacy and to_int(args.before, 1, INT64_MAX) is None:
            raise CliError("--before takes an instance id (a number) when instances are listed")
        if not legacy and not reader.UUID_TEXT.fullmatch(args.before):
            raise CliError("--before takes a run id (a lowercase UUID) when Runs are listed")
    _, database = open_db(args, create=False)
    with database.connection_context():
        if args.cron is not None:
            args.cron = cron_id_of(args.cron)
        if legacy:
            state = "failed" if args.failed else args.state
            listed = crons.list_instances(
                args.cron, None if state is None else INSTANCE_STATES.index(state), args.limit,
                None if args.before is None else int(args.before), args.since, args.until,
                host=args.host)
        else:
            listed = _list_runs(args, settings)
        names = {} if args.json else cron_names(r["cron_id"] for r in listed)
    if args.json:
        # As `status` and `reconcile`: the API's document (GET /open/runs, or
        # /open/crons/ID/instances), its `data` under "data" (`jq .data` reads either).
        print_json({"data": listed})
        return 0
    if not listed:
        hint = "" if legacy else " (manual runs are Legacy instances only: add --legacy)"
        print(f"no {'failed ' if args.failed else ''}{kind} match{hint}")
        return 0
    text = (_instances_table if legacy else _runs_table)(listed, names, args.utc)
    sys.stdout.write(_with_hosts(text, listed))
    if len(listed) == args.limit:
        print(f"more: add --before {listed[-1]['id']}")
    return 0


def _read(args, fn, *fn_args):
    """Run fn over a connection, creating nothing and taking no write lock."""
    _, database = open_db(args, create=False)
    with database.connection_context():
        return fn(*fn_args)


def cmd_accept_failures(args) -> int:
    """Shadow admissions that were refused or failed (failed jobs are `runs --failed`)."""
    if args.command == "failures":
        print("qlshadow: 'failures' is the old name of 'accept-failures'", file=sys.stderr)
    listed = _read(args, reader.list_failures, args.limit, args.before)
    if args.json:
        print_json(listed)
    elif not listed:
        print("no Shadow accept failures (failed jobs: qlshadow runs --failed)")
    else:
        columns = [Column("id", right=True), Column("at"), Column("reason"),
                   Column("cron", right=True), Column("detail", shrink=True)]
        rows = [[f["id"], when(f["at"], args.utc), f["reason"], f["cron_id"], f["detail"]]
                for f in listed]
        sys.stdout.write(table(columns, rows, terminal_width()))
    return 0
