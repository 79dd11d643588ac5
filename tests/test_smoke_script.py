"""scripts/smoke.sh (CONTRACT.md §14): a curl-only check of a running service that passes against a
live server on either backend, says when the Shadow check was skipped, leaves no cron behind,
and fails with a clear line against a stopped server or with a wrong token."""
from __future__ import annotations

import os
import subprocess

import pytest

from helpers import ROOT, http

SMOKE = os.path.join(ROOT, "scripts", "smoke.sh")
SHELLS = {"busybox": ["busybox", "sh"], "dash": ["dash"], "bash": ["bash"]}
SHADOW_ON = {"QL3_SHADOW_ORIGINS": "scheduled_system"}


def smoke(url: str, token: str, shell: str = "busybox") -> subprocess.CompletedProcess:
    return subprocess.run([*SHELLS[shell], SMOKE, url, token], capture_output=True, text=True,
                          timeout=120)


def lines(result, prefix: str) -> list:
    return [line for line in result.stdout.splitlines() if line.startswith(prefix)]


def crons(server) -> list:
    status, body = http("GET", server.url + "/open/crons", headers=server.headers)
    assert status == 200
    return body["data"]["data"]


@pytest.mark.parametrize("shell", SHELLS)
def test_it_passes_against_a_live_server_with_shadow_on(live_server, backend, shell):
    server = live_server(**SHADOW_ON)

    result = smoke(server.url, server.token, shell)

    assert result.returncode == 0, result.stdout + result.stderr
    assert lines(result, "FAIL") == [] and lines(result, "skip") == []
    assert len(lines(result, "ok - Shadow Run for legacy-system:")) == 1
    assert len(lines(result, "ok - ")) == 8


def test_it_reports_the_shadow_check_as_skipped_when_shadow_is_off(live_server, backend):
    server = live_server()

    result = smoke(server.url, server.token)

    assert result.returncode == 0, result.stdout + result.stderr
    assert lines(result, "skip - Shadow Run check skipped: Shadow is off")
    assert lines(result, "FAIL") == []


def test_it_leaves_no_cron_behind(live_server, backend):
    server = live_server(**SHADOW_ON)

    result = smoke(server.url, server.token)

    assert result.returncode == 0, result.stdout + result.stderr
    assert crons(server) == []
    assert [line for line in lines(result, "ok - temporary cron") if line.endswith(" deleted")]


def test_it_fails_with_a_clear_line_against_a_stopped_server(live_server, backend):
    server = live_server()
    server.stop()

    result = smoke(server.url, server.token)

    assert result.returncode != 0
    assert lines(result, f"FAIL - health: {server.url}/health (HTTP 000: curl:")
    assert lines(result, "ok") == []


def test_it_fails_with_a_clear_line_when_the_token_is_wrong(live_server, backend):
    server = live_server()

    result = smoke(server.url, "not-the-token")

    assert result.returncode != 0
    assert lines(result, "ok - health")
    assert lines(result, "FAIL - create temporary cron (HTTP 401:")
    assert crons(server) == []


def test_it_needs_a_url_and_a_token():
    result = subprocess.run(["dash", SMOKE, "http://127.0.0.1:1"], capture_output=True, text=True)

    assert result.returncode == 2
    assert "usage:" in result.stderr
