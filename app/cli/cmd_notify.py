"""`notify`: the alert tick crond runs every minute, or with --test a test message."""
from __future__ import annotations

import os
import sys

from qlshadow import config
from qlshadow.cli.common import load_settings
from qlshadow.cli.errors import CliError
from qlshadow.host import crontab
from qlshadow.storage import db


def cmd_notify(args) -> int:
    """The tick (watch/alerts/), or with --test a test message through every channel."""
    from qlshadow.watch import notify  # only this command sends notifications: keep it off other paths
    sources = notify.load_sources(config_file=args.config)
    channels = notify.configured_channels(sources.values, sources.origin)
    if not args.test:
        return _notify_tick(args, channels)
    for line in notify.notes(sources):
        print(f"qlshadow: {line}", file=sys.stderr)
    if not channels:
        raise CliError("no notification channel is configured; docs/NOTIFY.md lists the "
                       "variables (WEBHOOK_URL, TG_BOT_TOKEN, SMTP_SERVER, ...)")
    _use_language(config.language(config_file=args.config))
    title, content = notify.test_message()
    failed = 0
    for channel in channels:
        result = notify.send(channel, title, content)
        print(f"{channel.name}: {'ok' if result.ok else 'FAILED'}: {result.reason} "
              f"(settings from {', '.join(channel.sources)})", flush=True)
        failed += not result.ok
    return 1 if failed else 0


def _use_language(lang: str) -> None:
    """Notifications and the reasons they carry in QL_LANG (the CLI's own text stays English)."""
    if lang != "en":
        from qlshadow import i18n
        i18n.set_default(lang)


def _notify_tick(args, channels: list) -> int:
    shared = not config.sqlite_file(config.load(config_file=args.config).db_url)
    if not channels and not shared:
        # Nothing to send: crond's every-minute tick costs a start-up and no more.
        if args.verbose:
            print(_no_channel_note(args))
        return 0
    from qlshadow.watch.alerts import tick
    settings = load_settings(args)
    _use_language(settings.lang)
    database, _ = db.open_database(settings, create=False)
    # tick.sh says whether the service answered its request (watch/outage.py).
    answered = False if args.unanswered is not None else (True if args.answered else None)
    with database.connection_context():
        if shared:  # a fleet on one PostgreSQL: this host is alive, its block up to date
            from qlshadow.service import fleet
            try:
                fleet.tick(settings)
            except crontab.CrontabError as exc:
                print(f"qlshadow: crontab block not installed again: {exc}", file=sys.stderr)
        done = tick(settings, channels, answered=answered, why=args.unanswered or "")
    if args.verbose:
        print(" ".join(f"{key}={value}" for key, value in done.items()))
    return 0


def _no_channel_note(args) -> str:
    """What `notify -v` did with no channel: nothing, and where crond's tick finds its own."""
    said = "nothing was checked or sent: no notification channel is configured"
    read = args.config or os.environ.get("QL_CONFIG")
    if read:
        return f"{said} in {read} or the environment"
    try:
        conf = os.path.join(config.load().data_dir, crontab.NOTIFY_CONF)
    except config.ConfigError:
        conf = ""  # the settings' own mistake is for the commands that use them
    if conf and os.path.isfile(conf):
        return (f"{said} in the environment (no --config); crond's tick reads {conf}: "
                f"qlshadow notify -v --config {conf}")
    return f"{said} in the environment (no --config); docs/NOTIFY.md lists the variables"
