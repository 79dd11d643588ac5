"""The settings, one frozen object made once at start-up, and their defaults."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

# The data dir's database, WAL and task logs together (docs/STORAGE.md has the arithmetic:
# 20 crons every minute with the default retention fit, on an 8 MiB overlay).
DEFAULT_BUDGET_TEXT = "6M"
DEFAULT_STORAGE_BUDGET = 6 * 1024 * 1024


@dataclass(frozen=True)
class Settings:
    data_dir: str = "./data"
    db_url: str = "sqlite:///./data/qlshadow.db"
    host: str = "127.0.0.1"  # the first of hosts: the one URLs name
    hosts: tuple = ("127.0.0.1",)  # every listen address QL_HOST lists
    port: int = 5600
    threads: int = 2  # SQLite's default; PostgreSQL's is 4 (see load)
    scheduler: str = "node"
    crontab_file: str = "./data/crontab.list"
    crontab_install: str = "crontab {file}"
    crontab_list: str = "crontab -l"
    shadow_origins: frozenset = field(default_factory=frozenset)
    failure_cap: int = 1000
    max_body: int = 65536
    db_timeout: float = 5.0
    sqlite_synchronous: str = "full"
    # Parameters no environment variable sets: benches vary them through Settings, with
    # dataclasses.replace (scripts/bench.py's design space, scripts/bench_storage.py).
    # SQLite pragmas put over db.SQLITE_PRAGMAS (a page_size applies to a new file only);
    sqlite_pragmas: tuple = ()
    # False: callbacks bump no in-process counters (counters.Uncounted), /metrics shows zeros.
    count_metrics: bool = True
    # False: the Shadow write runs without its fail-open savepoint (what the savepoint costs,
    # scripts/guarantee_costs.py); a failed Shadow write then aborts the callback's whole
    # transaction on PostgreSQL, its Legacy write too: never for a real service.
    shadow_savepoint: bool = True
    base_url: str = "http://127.0.0.1:5600"
    callback_timeout: int = 5
    # Retention (docs/CONTRACT.md, "Retention"); 0 switches a limit off. Sized for a router:
    # a cron every minute for a year stays within a few MB of flash (README).
    retention_days: int = 30
    retention_rows_per_cron: int = 1000
    retention_logs_per_cron: int = 50
    retention_log_days: int = 7
    storage_budget: int = DEFAULT_STORAGE_BUDGET  # bytes; 0: no budget
    # Host names the status page answers at besides its own (views/page/hooks.py), lowercase.
    page_hosts: frozenset = field(default_factory=frozenset)
    # QingLong's `task` runner (shell/ql-task.sh) through runner.env; None: unset.
    scripts_dir: str | None = None  # None: $QL_DATA_DIR/scripts
    env_file: str | None = None
    notify_file: str | None = None
    lang: str = "en"  # QL_LANG: reasons and notifications; the page's default
    # QL_HOST_NAME: this host's name among the hosts sharing one database (crons name
    # the hosts they run on); the system's host name by default.
    host_name: str = "localhost"
    config_file: str | None = None
    # The keys whose value came from the config file (the environment did not override
    # them): such a value (a database password) need not be repeated on crontab lines,
    # which can point at the file instead.
    file_keys: frozenset = field(default_factory=frozenset)
    # Every key the environment or the config file set: the CLI fills the others from
    # what the server recorded in the data dir (crontab.recorded_settings).
    given_keys: frozenset = field(default_factory=frozenset)

    @property
    def shadow_on(self) -> bool:
        """True when system-crond callbacks are admitted to Shadow."""
        return "scheduled_system" in self.shadow_origins

    @property
    def log_dir(self) -> str:
        return os.path.join(self.data_dir, "log")

    @property
    def token_file(self) -> str:
        return os.path.join(self.data_dir, "token.json")


def default_threads(db_url: str) -> str:
    """QL_THREADS when unset: 2 on SQLite, 4 on PostgreSQL (docs/PERFORMANCE.md measures why).

    On SQLite callbacks are answered on waitress's loop thread (app/web/serving.py), so the
    worker threads serve only the other requests: two let a page and a gate run at once,
    and each more thread that renders a page keeps its own connection and heap arena. A
    PostgreSQL statement waits on a round trip, which other threads can use.
    """
    return "2" if db_url.startswith("sqlite:") else "4"
