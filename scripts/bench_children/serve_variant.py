"""`qlshadow serve` with other serving parameters and settings (scripts/bench.py's
--variants and --design-space); it changes nothing of the product, it passes parameters.

Argument: a JSON object of serving.serve options, plus "counters": "nometrics" for
Settings.count_metrics=False. BENCH_<PRAGMA> variables (WAL_AUTOCHECKPOINT, CACHE_SIZE,
PAGE_SIZE, JOURNAL_SIZE_LIMIT, SYNCHRONOUS: any level, "off" too) go to
Settings.sqlite_pragmas; BENCH_NO_RETENTION=1 sets every retention limit to 0 (off).
"""
import dataclasses
import json
import os
import sqlite3
import sys

from qlshadow import config
from qlshadow.web import serving

PRAGMAS = ("wal_autocheckpoint", "cache_size", "page_size", "journal_size_limit", "synchronous")
NO_RETENTION = {"retention_days": 0, "retention_rows_per_cron": 0, "retention_logs_per_cron": 0,
                "retention_log_days": 0, "storage_budget": 0}


def main() -> int:
    options = json.loads(sys.argv[1])
    settings = config.load()
    changes = {"sqlite_pragmas": tuple((key, os.environ["BENCH_" + key.upper()]) for key in PRAGMAS
                                       if os.environ.get("BENCH_" + key.upper()))}
    if options.pop("counters", "metrics") == "nometrics":
        changes["count_metrics"] = False
    if os.environ.get("BENCH_NO_RETENTION"):
        changes.update(NO_RETENTION)
    if os.environ.get("BENCH_PAGE_SIZE"):
        # The database was made by `qlshadow token system` before this page size: rebuild it
        # (still nearly empty) with the size asked for.
        conn = sqlite3.connect(config.sqlite_file(settings.db_url), isolation_level=None)
        for statement in ("PRAGMA journal_mode=delete",
                          f"PRAGMA page_size={int(os.environ['BENCH_PAGE_SIZE'])}",
                          "VACUUM", "PRAGMA journal_mode=wal"):
            conn.execute(statement)
        conn.close()
    return serving.serve(dataclasses.replace(settings, **changes), **options)


if __name__ == "__main__":
    sys.exit(main())
