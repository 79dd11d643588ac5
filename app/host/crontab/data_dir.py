"""The data dir as the crontab work names and writes it: its real path, files rewritten only
when their text changes, and its modes (0700, the SQLite files 0600)."""
from __future__ import annotations

import os

from qlshadow.files import write_private


def real_data_dir(settings) -> str:
    """The data dir as every crontab line and marker names it: its real path, so that two
    spellings of one dir (a symlink, `..`) find and replace the same block."""
    return os.path.realpath(settings.data_dir)


def write_if_changed(path: str, text: str) -> None:
    """Every cron change comes here: rewrite only on a difference (flash wears out)."""
    try:
        with open(path, encoding="utf-8") as fh:
            if fh.read() == text and os.stat(path).st_mode & 0o077 == 0:
                return
    except OSError:
        pass
    write_private(path, text)


def absolute_db_url(url: str) -> str:
    """A SQLite URL with an absolute path: crond runs tasks in another directory."""
    if not url.startswith("sqlite:///"):
        return url
    path, sep, query = url[len("sqlite:///"):].partition("?")
    return "sqlite:///" + os.path.abspath(path) + sep + query


def protect_data_dir(settings) -> None:
    """Data dir 0700 and the SQLite files 0600: task logs and commands often hold secrets."""
    data = real_data_dir(settings)
    paths = [data]
    if settings.db_url.startswith("sqlite:///"):
        db_file = os.path.abspath(settings.db_url[len("sqlite:///"):].split("?", 1)[0])
        paths += [db_file, db_file + "-wal", db_file + "-shm", db_file + "-journal"]
    for path in paths:
        try:
            if os.stat(path).st_uid == os.geteuid():
                os.chmod(path, 0o700 if path == data else 0o600)
        except OSError:
            pass  # missing, or not ours to change
