"""Settings: read once at start-up from the environment (and an optional KEY=VALUE file).

Every value goes through a small strict parser; a bad value raises ConfigError naming the
key, and the service refuses to start instead of silently falling back to a default.
"""
from __future__ import annotations

import ipaddress
import os
import re
import shlex
import shutil
from dataclasses import dataclass, field, replace
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

KNOWN_ORIGINS = frozenset({"manual", "scheduled_node", "scheduled_system"})
SCHEDULERS = ("system", "node")
# SQLite's synchronous levels we offer (docs/RELIABILITY.md, "Power cuts"): full keeps every
# answered callback across a power cut, normal fsyncs only at checkpoints.
SQLITE_SYNCHRONOUS = ("full", "normal")
# The languages of the page, health and gate reasons and notifications (app/i18n.py).
LANGUAGES = ("en", "zh_CN")

# Keys the config file may hold. QL_EXECUTION_ORIGIN is set by crontab lines for the shell,
# never read by the service; QL_BASE_URL and QL_CALLBACK_TIMEOUT are settings the service
# passes on to the shell on every crontab line and manual run.
FILE_KEYS = frozenset({
    "QL_DATA_DIR", "QL_DB_URL", "QL_HOST", "QL_PORT", "QL_THREADS", "QL_SCHEDULER",
    "QL_CRONTAB_FILE", "QL_CRONTAB_INSTALL", "QL_CRONTAB_LIST", "QL3_SHADOW_ORIGINS",
    "QL3_SHADOW_FAILURE_CAP", "QL_MAX_BODY", "QL_BASE_URL", "QL_CALLBACK_TIMEOUT", "QL_DB_TIMEOUT",
    "QL_RETENTION_DAYS", "QL_RETENTION_ROWS_PER_CRON", "QL_RETENTION_LOGS_PER_CRON",
    "QL_RETENTION_LOG_DAYS", "QL_SQLITE_SYNCHRONOUS", "QL_STORAGE_BUDGET", "QL_PAGE_HOSTS",
    "QL_SCRIPTS_DIR", "QL_ENV_FILE",
    "QL_LANG", "QL_HOST_NAME",
})

# Notification settings (docs/NOTIFY.md), read by qlshadow.watch.notify only, never by the
# service: QingLong's own variable names, so an operator's existing values work unchanged,
# plus our overrides of the channels' public addresses, the send timeout and the path of
# a QingLong config.sh to read them from.
NOTIFY_KEYS = frozenset({
    "QL_NOTIFY_TIMEOUT", "QL_NOTIFY_FILE", "SKIP_PUSH_TITLE",
    "WEBHOOK_URL", "WEBHOOK_METHOD", "WEBHOOK_CONTENT_TYPE", "WEBHOOK_BODY", "WEBHOOK_HEADERS",
    "NTFY_URL", "NTFY_TOPIC", "NTFY_PRIORITY", "NTFY_TOKEN", "NTFY_USERNAME", "NTFY_PASSWORD",
    "NTFY_ACTIONS",
    "GOTIFY_URL", "GOTIFY_TOKEN", "GOTIFY_PRIORITY",
    "BARK_PUSH", "BARK_ARCHIVE", "BARK_GROUP", "BARK_SOUND", "BARK_ICON", "BARK_LEVEL",
    "BARK_URL", "BARK_ORIGIN",
    "TG_BOT_TOKEN", "TG_USER_ID", "TG_API_HOST", "TG_PROXY_HOST", "TG_PROXY_PORT",
    "TG_PROXY_AUTH",
    "PUSH_KEY", "PUSH_KEY_ORIGIN",
    "PUSH_PLUS_TOKEN", "PUSH_PLUS_USER", "PUSH_PLUS_TEMPLATE", "PUSH_PLUS_CHANNEL",
    "PUSH_PLUS_WEBHOOK", "PUSH_PLUS_CALLBACKURL", "PUSH_PLUS_TO", "PUSH_PLUS_ORIGIN",
    "QYWX_KEY", "QYWX_ORIGIN", "QYWX_AM",
    "DD_BOT_TOKEN", "DD_BOT_SECRET", "DD_BOT_ORIGIN",
    "FSKEY", "FSSECRET", "FSKEY_ORIGIN",
    "SMTP_SERVER", "SMTP_SSL", "SMTP_EMAIL", "SMTP_PASSWORD", "SMTP_NAME",
    "DEER_KEY", "DEER_URL",
    "GOBOT_URL", "GOBOT_QQ", "GOBOT_TOKEN",
    "IGOT_PUSH_KEY", "IGOT_ORIGIN",
    "CHAT_URL", "CHAT_TOKEN",
    "WE_PLUS_BOT_TOKEN", "WE_PLUS_BOT_RECEIVER", "WE_PLUS_BOT_VERSION", "WE_PLUS_BOT_ORIGIN",
    "QMSG_KEY", "QMSG_TYPE", "QMSG_ORIGIN",
    "AIBOTK_KEY", "AIBOTK_TYPE", "AIBOTK_NAME", "AIBOTK_ORIGIN",
    "PUSHME_KEY", "PUSHME_URL",
    "CHRONOCAT_URL", "CHRONOCAT_QQ", "CHRONOCAT_TOKEN",
    "WXPUSHER_APP_TOKEN", "WXPUSHER_TOPIC_IDS", "WXPUSHER_UIDS", "WXPUSHER_ORIGIN",
})
# Variables of QingLong's notify.py that qlshadow reads but does not use: accepted
# wherever they are set (QingLong users carry them along), and named in a note by
# `qlshadow notify --test`.
NOTIFY_UNUSED_KEYS = frozenset({"HITOKOTO", "CONSOLE", "MEDIASABER_HOST", "MEDIASABER_APIKEY"})
# KEY=VALUE lines cannot hold a line break, so in the conf file these values write one as
# the two characters \n (an environment variable or a config.sh holds real line breaks).
NOTIFY_MULTILINE_KEYS = ("WEBHOOK_BODY", "WEBHOOK_HEADERS", "SKIP_PUSH_TITLE")


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the key."""


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


def _int(key: str, raw: str, lo: int, hi: int) -> int:
    text = raw.strip()
    if not text.isascii() or not text.lstrip("-").isdigit():
        raise ConfigError(f"{key}={raw!r} is not an integer")
    value = int(text)
    if not lo <= value <= hi:
        raise ConfigError(f"{key}={raw!r} must be between {lo} and {hi}")
    return value


_SIZE_UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}


def parse_size(key: str, raw: str) -> int:
    """Bytes of a size such as 6M, 512K or 6291456 (K, M, G: powers of 1024; 0: off)."""
    text = raw.strip().upper()
    digits, unit = (text[:-1], text[-1]) if text[-1:] in ("K", "M", "G") else (text, "")
    if not digits.isascii() or not digits.isdigit():
        raise ConfigError(f"{key}={raw!r} is not a size: a whole number of bytes, or with K, M or G")
    value = int(digits) * _SIZE_UNITS[unit]
    if value > 1024 ** 4:
        raise ConfigError(f"{key}={raw!r} must be at most 1024G")
    return value


def _float(key: str, raw: str, lo: float, hi: float) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{key}={raw!r} is not a number") from None
    if not lo <= value <= hi:
        raise ConfigError(f"{key}={raw!r} must be between {lo} and {hi}")
    return value


def parse_origins(raw: str) -> frozenset:
    """Parse QL3_SHADOW_ORIGINS: a comma list of known origin names; empty means off."""
    names = [part.strip() for part in raw.split(",") if part.strip()]
    unknown = [n for n in names if n not in KNOWN_ORIGINS]
    if unknown:
        raise ConfigError(
            f"QL3_SHADOW_ORIGINS has unknown origin {unknown[0]!r}; "
            f"known: {', '.join(sorted(KNOWN_ORIGINS))}")
    return frozenset(names)


SQLITE_URL_PREFIX = "sqlite:///"


# The suffix of a SQLite database's snapshot (app/storage/backup.py), beside the database.
SNAPSHOT_SUFFIX = ".snapshot"


def sqlite_file(url: str) -> str | None:
    """The file a sqlite:/// URL names (percent-decoded, query dropped); None for other URLs."""
    if not url.startswith(SQLITE_URL_PREFIX):
        return None
    return unquote(url[len(SQLITE_URL_PREFIX):].partition("?")[0])


def check_db_url(url: str) -> str:
    """Reject URLs that would silently mean something else (sqlite://x.db is in-memory)."""
    if url.startswith("sqlite:"):
        if not sqlite_file(url):
            raise ConfigError(
                f"QL_DB_URL={url!r} is not a SQLite file URL; write sqlite:///relative/path.db "
                "or sqlite:////absolute/path.db")
        if ":memory:" in url or "mode=memory" in url:
            raise ConfigError(f"QL_DB_URL={url!r}: an in-memory database would lose every record")
        return url
    if url.startswith(("postgresql://", "postgres://")):
        return url
    raise ConfigError(f"QL_DB_URL={url!r} must start with sqlite:/// or postgresql://")


def read_config_file(path: str) -> dict:
    """Read a KEY=VALUE file: '#' comments, blank lines, optional matching quotes."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    values = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[7:].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{path}:{number}: expected KEY=VALUE")
        if key not in FILE_KEYS and key not in NOTIFY_KEYS and key not in NOTIFY_UNUSED_KEYS:
            raise ConfigError(f"{path}:{number}: unknown key {key}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = value
    return values


def check_host(raw: str) -> str:
    """A listen address: an IPv4/IPv6 address or a host name (resolved when serving)."""
    host = raw.strip()
    if not host or any(c.isspace() for c in host) or not host.isascii():
        raise ConfigError(f"QL_HOST={raw!r} is not a host name or address")
    looks_numeric = all(c.isdigit() or c == "." for c in host) or ":" in host
    if looks_numeric:
        try:
            ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            raise ConfigError(f"QL_HOST={raw!r} is not a valid IP address") from None
        return host.strip("[]")
    return host


def check_hosts(raw: str) -> tuple:
    """QL_HOST: one listen address or host name, or several separated by commas."""
    return tuple(dict.fromkeys(check_host(part) for part in raw.split(",")))


def parse_page_hosts(raw: str) -> frozenset:
    """QL_PAGE_HOSTS: a comma list of host names (or addresses) the page also answers at."""
    names = set()
    for part in raw.split(","):
        name = part.strip().lower().rstrip(".")
        if not part.strip():
            continue
        if (not name or not name.isascii() or any(c.isspace() or c in "/[]@:" for c in name)):
            raise ConfigError(f"QL_PAGE_HOSTS has {part.strip()!r}, which is not a host name "
                              "(write names without a scheme, port or path, comma-separated)")
        names.add(name)
    return frozenset(names)


def parse_lang(raw: str) -> str:
    """QL_LANG: en or zh_CN, exactly (a typo must not silently mean English)."""
    lang = raw.strip()
    if lang not in LANGUAGES:
        raise ConfigError(f"QL_LANG={raw!r} must be one of {', '.join(LANGUAGES)}")
    return lang


def language(environ: Mapping[str, str] | None = None, config_file: str | None = None) -> str:
    """QL_LANG alone (the environment over the config file), for `notify --test`, which
    reads no other setting of the service."""
    env = os.environ if environ is None else environ
    path = config_file or env.get("QL_CONFIG") or None
    raw = env.get("QL_LANG")
    if raw is None:
        raw = (read_config_file(path) if path else {}).get("QL_LANG", "en")
    return parse_lang(raw)


def derive_base_url(host: str, port: int) -> str:
    """The URL tasks call: the listen address, with a wildcard address made loopback."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def check_base_url(raw: str) -> str:
    """QL_BASE_URL: http(s)://host[:port][/path], no spaces or quotes (it sits on crontab lines)."""
    url = raw.strip().rstrip("/")
    parts = urlsplit(url)
    if (parts.scheme not in ("http", "https") or not parts.netloc or parts.query
            or parts.fragment or not url.isascii()
            or any(c.isspace() or c in "'\"`$\\%" for c in url)):
        raise ConfigError(f"QL_BASE_URL={raw!r} must be an http:// or https:// URL "
                          "with no spaces, quotes, '%' or '$'")
    return url


def check_path(key: str, raw: str, absolute: bool = True) -> str | None:
    """An optional path setting: None when empty; one line, absolute unless told."""
    path = raw.strip()
    if not path:
        return None
    if any(c in path for c in "\n\r\0") or (absolute and not path.startswith("/")):
        raise ConfigError(f"{key}={raw!r} must be {'an absolute path' if absolute else 'a path'} "
                          "on one line")
    return path


def _command_words(key: str, raw: str) -> list:
    try:
        return shlex.split(raw)
    except ValueError as exc:
        raise ConfigError(f"{key}={raw!r} cannot be split into words ({exc})") from None


def crontab_commands(merged: Mapping[str, str]) -> tuple:
    """(install, list) commands: QL_CRONTAB_INSTALL and QL_CRONTAB_LIST, checked together.

    Installing replaces the crontab it installs into, so qlshadow reads that crontab first
    and keeps every line outside its block. An install command of the form `... crontab
    [options] {file}` is read with the same words and `-l` when QL_CRONTAB_LIST is not set;
    any other install command needs QL_CRONTAB_LIST, or reading the wrong crontab would
    copy its lines into this one.
    """
    install = merged.get("QL_CRONTAB_INSTALL", "crontab {file}")
    words = _command_words("QL_CRONTAB_INSTALL", install)
    if "QL_CRONTAB_LIST" in merged:
        listing = merged["QL_CRONTAB_LIST"]
        _command_words("QL_CRONTAB_LIST", listing)
        return install, listing
    if not words:
        return install, ""
    if (len(words) >= 2 and words[-1] == "{file}"
            and any(os.path.basename(word) == "crontab" for word in words[:-1])):
        return install, shlex.join(words[:-1] + ["-l"])
    raise ConfigError(f"QL_CRONTAB_INSTALL={install!r} needs QL_CRONTAB_LIST, the command that "
                      "prints the crontab it installs into (empty if that crontab holds only "
                      "qlshadow's lines)")


HOST_NAME_MAX = 63
_HOST_NAME = re.compile(rf"[A-Za-z0-9._-]{{1,{HOST_NAME_MAX}}}")


def system_host_name() -> str:
    """The system's host name; "localhost" when it is not a valid QL_HOST_NAME."""
    import socket
    name = socket.gethostname().strip()
    return name if _HOST_NAME.fullmatch(name) else "localhost"


def check_host_name(raw: str) -> str:
    """QL_HOST_NAME: letters, digits and `.-_`, at most 63 characters."""
    if not _HOST_NAME.fullmatch(raw) or raw == "*":
        raise ConfigError(f"QL_HOST_NAME={raw!r} must be 1 to {HOST_NAME_MAX} letters, digits, "
                          "dots, hyphens or underscores")
    return raw


def _detect_scheduler() -> str:
    return "system" if (shutil.which("crond") or shutil.which("cron")) else "node"


def load(environ: Mapping[str, str] | None = None, config_file: str | None = None) -> Settings:
    """Build Settings from a config file (optional) overlaid by the environment."""
    env = dict(os.environ if environ is None else environ)
    path = config_file or env.get("QL_CONFIG") or None
    file_values = read_config_file(path) if path else {}
    from_env = {k: v for k, v in env.items() if k.startswith(("QL_", "QL3_"))}
    merged = {**file_values, **from_env}

    data_dir = merged.get("QL_DATA_DIR", "./data").strip()
    if not data_dir:
        raise ConfigError("QL_DATA_DIR must not be empty")
    data_dir = data_dir.rstrip("/") or "/"
    db_url = check_db_url(merged.get("QL_DB_URL", "").strip() or f"sqlite:///{data_dir}/qlshadow.db")

    hosts = check_hosts(merged.get("QL_HOST", "127.0.0.1"))
    host = hosts[0]
    port = _int("QL_PORT", merged.get("QL_PORT", "5600"), 0, 65535)
    base_url = merged.get("QL_BASE_URL", "").strip()
    base_url = check_base_url(base_url) if base_url else derive_base_url(host, port)

    crontab_install, crontab_list = crontab_commands(merged)
    scheduler = merged.get("QL_SCHEDULER", "").strip()
    if scheduler and scheduler not in SCHEDULERS:
        raise ConfigError(f"QL_SCHEDULER={scheduler!r} must be 'system' or 'node'")

    synchronous = merged.get("QL_SQLITE_SYNCHRONOUS", "full").strip()
    if synchronous not in SQLITE_SYNCHRONOUS:
        raise ConfigError(f"QL_SQLITE_SYNCHRONOUS={merged['QL_SQLITE_SYNCHRONOUS']!r} "
                          "must be 'full' or 'normal'")

    return Settings(
        data_dir=data_dir,
        db_url=db_url,
        host=host,
        hosts=hosts,
        port=port,
        threads=_int("QL_THREADS", merged.get("QL_THREADS", default_threads(db_url)), 1, 64),
        scheduler=scheduler or _detect_scheduler(),
        crontab_file=merged.get("QL_CRONTAB_FILE", "").strip() or os.path.join(data_dir, "crontab.list"),
        crontab_install=crontab_install,
        crontab_list=crontab_list,
        shadow_origins=parse_origins(merged.get("QL3_SHADOW_ORIGINS", "")),
        failure_cap=_int("QL3_SHADOW_FAILURE_CAP", merged.get("QL3_SHADOW_FAILURE_CAP", "1000"),
                         0, 10_000_000),
        max_body=_int("QL_MAX_BODY", merged.get("QL_MAX_BODY", "65536"), 256, 16 * 1024 * 1024),
        db_timeout=_float("QL_DB_TIMEOUT", merged.get("QL_DB_TIMEOUT", "5"), 0.1, 300),
        sqlite_synchronous=synchronous,
        base_url=base_url,
        callback_timeout=_int("QL_CALLBACK_TIMEOUT", merged.get("QL_CALLBACK_TIMEOUT", "5"), 1, 300),
        retention_days=_int("QL_RETENTION_DAYS", merged.get("QL_RETENTION_DAYS", "30"), 0, 36500),
        retention_rows_per_cron=_int("QL_RETENTION_ROWS_PER_CRON",
                                     merged.get("QL_RETENTION_ROWS_PER_CRON", "1000"), 0, 10_000_000),
        retention_logs_per_cron=_int("QL_RETENTION_LOGS_PER_CRON",
                                     merged.get("QL_RETENTION_LOGS_PER_CRON", "50"), 0, 10_000_000),
        retention_log_days=_int("QL_RETENTION_LOG_DAYS", merged.get("QL_RETENTION_LOG_DAYS", "7"), 0, 36500),
        storage_budget=parse_size("QL_STORAGE_BUDGET",
                                  merged.get("QL_STORAGE_BUDGET", DEFAULT_BUDGET_TEXT)),
        page_hosts=parse_page_hosts(merged.get("QL_PAGE_HOSTS", "")),
        scripts_dir=check_path("QL_SCRIPTS_DIR", merged.get("QL_SCRIPTS_DIR", "")),
        env_file=check_path("QL_ENV_FILE", merged.get("QL_ENV_FILE", "")),
        # Relative is allowed here as notify_sources allows it (an absolute path from the cwd).
        notify_file=check_path("QL_NOTIFY_FILE", merged.get("QL_NOTIFY_FILE", ""), absolute=False),
        lang=parse_lang(merged.get("QL_LANG", "en")),
        host_name=check_host_name(merged.get("QL_HOST_NAME", "").strip() or system_host_name()),
        config_file=path,
        file_keys=frozenset(file_values.keys() - from_env.keys()),
        given_keys=frozenset(merged),
    )


def default_threads(db_url: str) -> str:
    """QL_THREADS when unset: 2 on SQLite, 4 on PostgreSQL (docs/PERFORMANCE.md measures why).

    On SQLite callbacks are answered on waitress's loop thread (app/web/serving.py), so the
    worker threads serve only the other requests: two let a page and a gate run at once,
    and each more thread that renders a page keeps its own connection and heap arena. A
    PostgreSQL statement waits on a round trip, which other threads can use.
    """
    return "2" if db_url.startswith("sqlite:") else "4"


def with_port(settings: Settings, port: int) -> Settings:
    """Settings for the port actually bound (QL_PORT=0 picks one); a derived base URL follows."""
    base_url = settings.base_url
    if base_url == derive_base_url(settings.host, settings.port):
        base_url = derive_base_url(settings.host, port)
    return replace(settings, port=port, base_url=base_url)


@dataclass(frozen=True)
class NotifySources:
    """The notification variables, where each one came from (a file's path, or
    ENVIRONMENT), and one warning per line of QL_NOTIFY_FILE that could not be read."""
    values: dict
    origin: dict
    warnings: tuple = ()


ENVIRONMENT = "the environment"


def notify_sources(environ: Mapping[str, str] | None = None, config_file: str | None = None,
                   ql_file: bool = True) -> NotifySources:
    """The notification variables (NOTIFY_KEYS and NOTIFY_UNUSED_KEYS): the environment
    over the conf file over QL_NOTIFY_FILE, read here so the server can hand them to the
    notify tick (notify.conf) without loading the channels.

    The conf file is the one `load` reads (--config, else QL_CONFIG). As in QingLong, an
    empty value counts as unset, so it hides nothing. With ql_file=False QL_NOTIFY_FILE is
    only checked and given as an absolute path (the tick reads it each time: an edit made
    in QingLong's panel reaches the next message without a restart).
    """
    env = os.environ if environ is None else environ
    path = config_file or env.get("QL_CONFIG") or None
    keys = NOTIFY_KEYS | NOTIFY_UNUSED_KEYS
    values: dict = {}
    origin: dict = {}
    for key, value in (read_config_file(path) if path else {}).items():
        if key in keys and value:
            values[key] = value.replace("\\n", "\n") if key in NOTIFY_MULTILINE_KEYS else value
            origin[key] = path
    for key in keys:
        if env.get(key):
            values[key], origin[key] = env[key], ENVIRONMENT
    warnings: tuple = ()
    ql_path = values.get("QL_NOTIFY_FILE", "").strip()
    if ql_path:
        ql_path = values["QL_NOTIFY_FILE"] = os.path.abspath(ql_path)
        found, warnings = read_ql_notify_file(ql_path)
        if ql_file:
            for key, value in found.items():
                if key not in values:
                    values[key], origin[key] = value, ql_path
    return NotifySources(values, origin, warnings)


def notify_settings(environ: Mapping[str, str] | None = None, config_file: str | None = None,
                    ql_file: bool = True) -> dict:
    """The notification variables alone (notify_sources)."""
    return notify_sources(environ, config_file, ql_file).values


# A shell assignment `[export ]NAME=`; a function's first line; the words that open and
# close a shell block (an assignment inside one may not run: it is not read).
_ASSIGNMENT = re.compile(r"[ \t]*(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_]*)=")
_FUNCTION = re.compile(r"[ \t]*(?:function[ \t]+[\w-]+|[\w-]+[ \t]*\(\))")
_BLOCK_WORDS = {"if": 1, "case": 1, "for": 1, "while": 1, "until": 1, "select": 1,
                "fi": -1, "esac": -1, "done": -1}
_NAME_START = re.compile(r"[A-Za-z_{(0-9@*#?$!-]")


class _Unreadable(Exception):
    """A value that only running the shell would give (an expansion, a command)."""


def _shell_word(text: str, i: int) -> tuple[str, int]:
    """The value of the shell word at text[i:] and the index after it, without running
    anything: quotes and backslashes as sh reads them. Raises _Unreadable for `$...`,
    backquotes or an unterminated quote (then the index is the end of the line)."""
    out = []
    while i < len(text):
        c = text[i]
        if c in " \t\n;&|<>":
            break
        if c == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise _Unreadable("a quote is not closed")
            out.append(text[i + 1:end])
            i = end + 1
        elif c == '"':
            i += 1
            while True:
                if i >= len(text):
                    raise _Unreadable("a quote is not closed")
                c = text[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\" and i + 1 < len(text):
                    nxt = text[i + 1]
                    if nxt != "\n":  # a backslash-newline joins the lines
                        out.append(nxt if nxt in '$`"\\' else c + nxt)
                    i += 2
                    continue
                if c == "`" or (c == "$" and _NAME_START.match(text, i + 1)):
                    raise _Unreadable("it needs the shell to expand it")
                out.append(c)
                i += 1
        elif c == "\\":
            if text[i + 1:i + 2] != "\n":
                out.append(text[i + 1:i + 2])
            i += 2
        elif c == "`" or (c == "$" and _NAME_START.match(text, i + 1)):
            raise _Unreadable("it needs the shell to expand it")
        else:
            out.append(c)
            i += 1
    return "".join(out), i


def _skip_parens(text: str, i: int) -> int:
    """The index after the `)` that closes the array starting at text[i] == '('."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c in "'\"":
            end = text.find(c, i + 1)
            i = len(text) if end < 0 else end + 1
            continue
        if c == "#" and (i == 0 or text[i - 1] in " \t\n("):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        depth += {"(": 1, ")": -1}.get(c, 0)
        i += 1
        if depth == 0:
            break
    return i


def read_ql_notify_file(path: str) -> tuple[dict, tuple]:
    """The notification variables a QingLong config.sh (or any file of KEY=VALUE and
    `export KEY="VALUE"` lines) assigns, and one warning per line that sets one in a way
    we cannot read. Nothing is run; every other line is skipped (comments, arrays,
    functions, other settings). Raises ConfigError when the file cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(f"cannot read QL_NOTIFY_FILE {path}: {exc.strerror}") from None
    wanted = (NOTIFY_KEYS | NOTIFY_UNUSED_KEYS) - {"QL_NOTIFY_FILE"}
    values: dict = {}
    warnings: list = []
    i, line, depth, braces, pending = 0, 1, 0, 0, False
    while i < len(text):
        end = _line_end(text, i)
        start = i
        match = _ASSIGNMENT.match(text, i, end)
        code = re.sub(r"'[^']*'|\"[^\"]*\"|(^|\s)#.*", " ", text[i:end])
        if braces > 0 or pending or not match:
            # Not an assignment we read: skip the line, keeping count of the functions
            # (their bodies run only when called) and of if/case/loop blocks.
            if braces > 0 or (pending and "{" in code):
                braces += code.count("{") - code.count("}")
                pending = False
            elif _FUNCTION.match(code):
                braces = code.count("{") - code.count("}")
                pending = "{" not in code
            else:
                for word in re.findall(r"(?:^|[;&|]|\bthen|\bdo)\s*(\w+)", code):
                    depth = max(depth + _BLOCK_WORDS.get(word, 0), 0)
            i, line = end + 1, line + 1
            continue
        key, i = match.group(1), match.end()
        value = reason = None
        if text.startswith("(", i):
            i = _skip_parens(text, i)  # an array: never a notification variable
        else:
            try:
                value, i = _shell_word(text, i)
            except _Unreadable as exc:
                reason, i = str(exc), end
        rest = text[i:_line_end(text, i)].strip()
        if reason is None and rest and not rest.startswith(("#", ";")):
            reason = "more follows it on the line"
        if reason is None and depth > 0:
            reason = "it sits inside an if, case or loop"
        if key in wanted and (reason or value is not None):
            if reason:
                warnings.append(f"{path}:{line}: {key} not read: {reason}")
            elif value:
                values[key] = value
            else:
                values.pop(key, None)  # an empty value unsets, as in the shell
        if reason is None and rest.startswith(";"):  # `A=1; B=2`: go on after the `;`
            i = text.index(";", i) + 1
        else:
            i = _line_end(text, i) + 1
        line += text.count("\n", start, i)
    return values, tuple(warnings)


def _line_end(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end
