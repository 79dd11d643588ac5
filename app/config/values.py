"""The strict parser of each value: a bad one raises ConfigError naming its key."""
from __future__ import annotations

import ipaddress
import os
import re
import shlex
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

from qlshadow.config.errors import ConfigError
from qlshadow.config.keys import KNOWN_ORIGINS, LANGUAGES


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


def parse_float(key: str, raw: str, lo: float, hi: float) -> float:
    """A number between lo and hi (QL_DB_TIMEOUT; QL_NOTIFY_TIMEOUT, read by watch/notify)."""
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
