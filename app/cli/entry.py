"""The command line's entry: parse, run the command's handler, and map every failure to one
line on stderr and an exit status."""
from __future__ import annotations

import importlib
import os
import signal
import sys

from qlshadow import config
from qlshadow.cli.errors import EXIT_INTERNAL, CliError
from qlshadow.cli.parser import build_parser
from qlshadow.errors import QlError


def _database_errors() -> tuple:
    """Peewee's DatabaseError and InterfaceError once a command has loaded Peewee (only such a
    command can raise them); before that, nothing to catch."""
    peewee = sys.modules.get("peewee")
    return (peewee.DatabaseError, peewee.InterfaceError) if peewee is not None else ()


def main(argv=None) -> int:
    """Run the command line; returns the exit status."""
    # Files this process creates (database, WAL, tokens, crontab) are its user's only.
    os.umask(0o077)
    args = build_parser().parse_args(argv)
    module, _, name = args.handler.partition(":")
    handler = getattr(importlib.import_module(f"qlshadow.cli.{module}"), name)
    try:
        status = handler(args)
        sys.stdout.flush()  # here, where a closed pipe can still be caught
        return status
    except BrokenPipeError:
        # The reader left (`qlshadow runs | head -1`): stop quietly, as the signal module's
        # note on SIGPIPE shows: point stdout at /dev/null so that the flush at exit cannot
        # fail again, and exit as a command killed by SIGPIPE would (128 + 13).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt:
        return 128 + signal.SIGINT  # Ctrl-C (ending `log -f`, say): no traceback
    except (config.ConfigError, CliError, QlError) as exc:
        print(f"qlshadow: {exc}", file=sys.stderr)
        return getattr(exc, "exit_status", 1)  # 75: the data dir's disk is not mounted yet
    except _database_errors() as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"qlshadow: database error: {first}", file=sys.stderr)
    except OSError as exc:
        print(f"qlshadow: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
    except Exception as exc:  # noqa: BLE001 - a defect: one line and its own code, not 1
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"qlshadow: internal error ({type(exc).__name__}{': ' + cause if cause else ''}); "
              "please report it", file=sys.stderr)
        return EXIT_INTERNAL
    return 1
