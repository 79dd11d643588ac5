"""Which channels are configured, and from where: the notification variables as config reads
them (the environment, the conf file, QL_NOTIFY_FILE), each channel's settings checked by
its builder without sending, and the file each channel's settings came from."""
from __future__ import annotations

from collections.abc import Mapping

from qlshadow import config
from qlshadow.watch.notify.model import DEFAULT_TIMEOUT, Channel, ChannelError
from qlshadow.watch.notify.registry import CHANNELS


# The notification variables from the environment, the conf file and QL_NOTIFY_FILE
# (config reads them), with or without where each came from.
load_settings = config.notify_settings
load_sources = config.notify_sources


class _Reads(dict):
    """The settings, noting which ones a channel's builder read."""
    def __init__(self, values: Mapping[str, str]):
        super().__init__(values)
        self.read: set = set()

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)


def configured_channels(values: Mapping[str, str] | None = None,
                        origin: Mapping[str, str] | None = None) -> list[Channel]:
    """Every channel with one of its variables set, in a fixed order.

    A channel whose settings are incomplete or bad is listed too, with `error` set, so
    the operator hears about it instead of silently getting nothing.
    Raises config.ConfigError for a bad QL_NOTIFY_TIMEOUT.
    """
    values = load_settings() if values is None else dict(values)
    timeout = DEFAULT_TIMEOUT
    if values.get("QL_NOTIFY_TIMEOUT", "").strip():
        timeout = config.parse_float("QL_NOTIFY_TIMEOUT", values["QL_NOTIFY_TIMEOUT"], 0.5, 120)
    channels = []
    for name, (triggers, build) in CHANNELS.items():
        if not any(values.get(key, "").strip() for key in triggers):
            continue
        reads = _Reads(values)
        try:
            build(reads, "title", "content")  # validates the settings; nothing is sent
            error = ""
        except ChannelError as exc:
            error = str(exc)
        used = reads.read | {key for key in triggers if values.get(key, "").strip()}
        sources = sorted({origin[key] for key in used if key in (origin or {})})
        channels.append(Channel(name, values, timeout, error, tuple(sources)))
    return channels


def notes(sources: config.NotifySources) -> list[str]:
    """What `notify --test` says about the settings besides the channels: each line of
    QL_NOTIFY_FILE it could not read, each QingLong variable it does not use."""
    lines = [f"warning: {text}" for text in sources.warnings]
    for key in sorted(config.NOTIFY_UNUSED_KEYS & sources.values.keys()):
        lines.append(f"note: {key} (from {sources.origin[key]}) is a QingLong setting "
                     "qlshadow does not use")
    return lines


def skipped(values: Mapping[str, str], title: str) -> bool:
    """True when SKIP_PUSH_TITLE (one title a line, as in QingLong) lists this title."""
    return title in values.get("SKIP_PUSH_TITLE", "").splitlines()
