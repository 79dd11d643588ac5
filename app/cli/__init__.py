"""The qlshadow command: serve, db init, app, token, cron, crontab, runs, log, reconcile,
prune, backup, notify, accept-failures, import, adopt.

Every command prints one clear line on stderr and exits non-zero when it fails. Data
commands print a table for people (times in the box's local time, --utc for UTC) and
--json for scripts; commands that change something say what they did in one line.

entry.py runs the command line (the console script's qlshadow.cli:main), parser.py holds
every command's options, and each cmd_*.py one group of commands, loaded only when one of
them runs; common.py and options.py hold what several commands share.
"""
from qlshadow.cli.entry import main
from qlshadow.cli.errors import EXIT_INTERNAL, CliError
from qlshadow.cli.parser import build_parser

__all__ = ["EXIT_INTERNAL", "CliError", "build_parser", "main"]
