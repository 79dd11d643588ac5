"""QL_HOST as a comma list (docs/CONTRACT.md §1): every host is listened on, all on one
port; the first names the URLs (the callbacks' base URL, the start-up line)."""
from __future__ import annotations

import pytest

from qlshadow import config
from qlshadow.web import serving


def test_a_comma_list_gives_every_host_once_and_the_first_names_the_urls():
    settings = config.load(environ={"QL_HOST": "127.0.0.1, ::1,127.0.0.1", "QL_PORT": "5601"})

    assert settings.hosts == ("127.0.0.1", "::1")
    assert settings.host == "127.0.0.1"
    assert settings.base_url == "http://127.0.0.1:5601"


@pytest.mark.parametrize("raw", ["127.0.0.1,", "127.0.0.1,,::1", "127.0.0.1,300.1.1.1"])
def test_an_empty_or_bad_item_stops_start_up_naming_the_key(raw):
    with pytest.raises(config.ConfigError, match="QL_HOST"):
        config.load(environ={"QL_HOST": raw})


def test_every_host_of_the_list_gets_a_socket_on_one_port():
    sockets = serving.listen_sockets(("127.0.0.1", "127.0.0.2"), 0)
    try:
        bound = sorted(sock.getsockname()[:2] for sock in sockets)
    finally:
        for sock in sockets:
            sock.close()

    assert [address for address, _ in bound] == ["127.0.0.1", "127.0.0.2"]
    assert bound[0][1] == bound[1][1] != 0
