"""The retention policy: the settings in force (Policy) and where they come from (policy_of)."""
from __future__ import annotations

from dataclasses import dataclass

DAY = 86400


@dataclass(frozen=True)
class Policy:
    """The retention settings in force; 0 switches a limit off."""
    days: int = 0
    rows_per_cron: int = 0
    logs_per_cron: int = 0
    log_days: int = 0
    log_dir: str = ""
    budget: int = 0  # bytes (storage_use); 0: none
    db_path: str = ""  # the SQLite file the budget covers

    @property
    def rows_on(self) -> bool:
        return bool(self.days or self.rows_per_cron or self.budget)

    @property
    def logs_on(self) -> bool:
        return bool(self.log_dir and (self.logs_per_cron or self.log_days))


def policy_of(settings) -> Policy:
    """The retention policy of settings (the budget only on SQLite: it counts its files)."""
    from qlshadow.config import sqlite_file
    path = sqlite_file(settings.db_url)
    return Policy(settings.retention_days, settings.retention_rows_per_cron,
                  settings.retention_logs_per_cron, settings.retention_log_days,
                  settings.log_dir, settings.storage_budget if path else 0, path or "")
