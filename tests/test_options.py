"""OPTIONS is a method no path takes: a JSON 405 with an Allow header naming the methods the
path does take (docs/CONTRACT.md §2.1, §8, §9), on the status page, /metrics and the API."""
from __future__ import annotations

import pytest

from helpers import ONE_BACKEND, http

PATHS = {"/page/": "GET, HEAD", "/page/login": "GET, HEAD, POST", "/page/logout": "POST",
         "/page/gate": "GET, HEAD", "/page/health": "GET, HEAD", "/page/crons/1": "GET, HEAD",
         "/metrics": "GET, HEAD", "/health": "GET, HEAD",
         "/open/crons": "DELETE, GET, HEAD, POST, PUT", "/open/crons/status": "POST, PUT"}


@ONE_BACKEND
@pytest.mark.parametrize("path, allow", PATHS.items(), ids=list(PATHS))
def test_options_is_a_json_405_naming_the_allowed_methods(client, path, allow):
    response = client.open(path, method="OPTIONS")
    assert response.status_code == 405
    assert response.get_json() == {"code": 405,
                                   "message": "This method is not allowed on this endpoint."}
    assert response.headers["Allow"] == allow


@ONE_BACKEND
def test_options_on_an_unknown_path_stays_a_404(client):
    assert client.open("/page/nothing-here", method="OPTIONS").status_code == 404


@ONE_BACKEND
def test_another_refused_method_names_the_allowed_ones_too(client):
    response = client.post("/page/gate")
    assert (response.status_code, response.headers["Allow"]) == (405, "GET, HEAD")


@ONE_BACKEND
def test_options_through_the_real_server_is_a_405(live_server):
    server = live_server()
    for path in ("/page/", "/metrics", "/open/crons/status"):
        status, body = http("OPTIONS", server.url + path)
        assert (status, body["code"]) == (405, 405), path
