"""The database schema: the names the rest of qlshadow uses, from the modules that hold them.

- runner: the stored version and upgrade_schema/check_version, which bring a database to it;
- steps: STEPS, the ordered steps (and LATEST, their number);
- rekey_runs, slim_runs: steps 1 and 2, with frozen copies of what they store;
- helpers: what steps are written with (add a table, indexes, a column; the schema lock);
- mounts: check_mounted, nothing created under a mount point not mounted yet.

Start-up loads it (db.open_database, the CLI's check_mounted); the callback path never does.
RunV1 (rekey_runs) is imported on first use: only step 1 and the tests of old databases
need that frozen table.
"""
from __future__ import annotations

from qlshadow.storage.schema.helpers import PG_LOCK_KEY, add_column, add_indexes, add_table
from qlshadow.storage.schema.mounts import NotMounted, check_mounted, mount_targets
from qlshadow.storage.schema.runner import (PAGE_SIZE, VERSION_TABLE, SchemaError, check_version,
                                            upgrade_schema)
from qlshadow.storage.schema.slim_runs import MOVE_COLUMNS, MOVED, _slim, move_old_runs
from qlshadow.storage.schema.steps import LATEST, STEPS

# _slim: the benches store Runs as step 2 does (scripts/bench_storage.py and others).
__all__ = ["LATEST", "MOVED", "MOVE_COLUMNS", "NotMounted", "PAGE_SIZE", "PG_LOCK_KEY", "RunV1",
           "STEPS", "SchemaError", "VERSION_TABLE", "_slim", "add_column", "add_indexes",
           "add_table", "check_mounted", "check_version", "move_old_runs", "mount_targets",
           "upgrade_schema"]


def __getattr__(name: str):
    """RunV1, from rekey_runs, imported on first use (a usual start never builds it)."""
    if name == "RunV1":
        from qlshadow.storage.schema.rekey_runs import RunV1
        return RunV1
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
