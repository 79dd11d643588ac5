"""What a sqlite:/// URL names, read in one place (config.sqlite_file) by every user."""
from __future__ import annotations

import pytest

from qlshadow.config import ConfigError, check_db_url, sqlite_file
from helpers import run_cli


@pytest.mark.parametrize("url, path", [
    ("sqlite:///data/q.db", "data/q.db"),
    ("sqlite:////srv/ql/q.db", "/srv/ql/q.db"),
    ("sqlite:////srv/my%20ql/q.db?timeout=5", "/srv/my ql/q.db"),
])
def test_the_file_is_the_percent_decoded_path_without_the_query(url, path):
    assert sqlite_file(url) == path


@pytest.mark.parametrize("url", ["postgresql://ql@db/ql", "postgres://db/ql", "sqlite://x.db"])
def test_a_url_that_is_not_sqlite_file_names_no_file(url):
    assert sqlite_file(url) is None


@pytest.mark.parametrize("url", ["sqlite:///", "sqlite:///?timeout=5"])
def test_a_sqlite_url_without_a_path_is_refused(url):
    with pytest.raises(ConfigError, match="is not a SQLite file URL"):
        check_db_url(url)


def test_the_gate_command_finds_the_database_db_init_made_at_a_percent_encoded_path(tmp_path):
    folder = tmp_path / "my data"
    folder.mkdir()
    env = {"QL_DATA_DIR": str(folder),
           "QL_DB_URL": "sqlite:///" + str(folder / "ql.db").replace(" ", "%20")}
    run_cli(env, "db", "init")
    assert (folder / "ql.db").is_file()

    result = run_cli(env, "reconcile", "--json", check=False)

    assert "no database" not in result.stderr
    assert result.returncode == 3, result.stderr  # an empty database: too little data
