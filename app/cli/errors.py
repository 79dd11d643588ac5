"""How a command fails: CliError, one line on stderr, and the exit status of a defect."""
from __future__ import annotations


# An unexpected exception (a defect) exits with EX_SOFTWARE from sysexits.h: 1 stays the
# command's own "no" (the gate failed, a cron is unknown), 2 a usage mistake.
EXIT_INTERNAL = 70


class CliError(Exception):
    """A failure reported as one line on stderr."""
