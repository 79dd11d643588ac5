"""What several commands use: their settings, their database, JSON output, and a cron named
on the command line (by id or by name, cli/options.py's cron_ref) as its id."""
from __future__ import annotations

import json
import os

from qlshadow import config
from qlshadow.cli.errors import CliError
from qlshadow.host import crontab
from qlshadow.storage import db


def load_settings(args, server: bool = False) -> config.Settings:
    """The command's settings; a CLI command fills what it was not given from the server's
    record in the data dir, so that it installs the crontab exactly where the server does."""
    settings = config.load(config_file=args.config)
    # Before anything is made under the data dir (the dir itself, tokens, the database):
    # its disk may not be mounted yet.
    from qlshadow.storage.schema import check_mounted
    check_mounted(settings)
    read = settings.config_file
    if read and os.path.dirname(os.path.abspath(read)) == os.path.abspath(settings.data_dir):
        # runner.conf or notify.conf, which task.sh and the crontab's notify line name: ours,
        # and kept 0600.
        from qlshadow.files import make_private
        make_private(read)
    if server:
        return settings
    adopted = crontab.settings_to_adopt(settings)
    if not adopted:
        return settings
    return config.load(environ={**os.environ, **adopted}, config_file=args.config)


def open_db(args, create: bool = True):
    """(settings, database) for a command; read-only commands pass create=False."""
    settings = load_settings(args)
    database, _ = db.open_database(settings, create=create)
    return settings, database


def print_json(data) -> None:
    """The data as indented JSON on stdout (--json, and the commands that print only JSON)."""
    print(json.dumps(data, indent=2, ensure_ascii=False))


def cron_names(cron_ids) -> dict:
    """{cron id: name} of the crons with these ids, as stored now."""
    from qlshadow.storage.models import Cron
    wanted = list(set(cron_ids))
    if not wanted:
        return {}
    return dict(Cron.select(Cron.id, Cron.name).where(Cron.id.in_(wanted)).tuples())


def cron_id_of(ref) -> int:
    """The id of a cron given by id or by name; an unknown or ambiguous name is a CliError."""
    if isinstance(ref, int):
        return ref
    from qlshadow.storage.models import Cron
    ids = [row[0] for row in Cron.select(Cron.id).where(Cron.name == ref)
           .order_by(Cron.id).limit(10).tuples()]
    if not ids:
        raise CliError(f"no cron is named {ref!r}; `qlshadow cron list` shows every cron's "
                       "id and name")
    if len(ids) > 1:
        raise CliError(f"{len(ids)} crons are named {ref!r} (ids "
                       f"{', '.join(map(str, ids))}); name the one you mean by its id")
    return ids[0]


def cron_ids_of(refs) -> list:
    """The ids of crons given by id or name, each once, in the order given."""
    return list(dict.fromkeys(cron_id_of(ref) for ref in refs))
