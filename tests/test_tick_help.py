"""shell/tick.sh, the crontab block's tick line, answers --help like the other scripts: usage
on stdout, exit 0, and no tick (no request, no `qlshadow notify`), under every shell."""
from __future__ import annotations

import os
import subprocess

import pytest

from helpers import ROOT

SHELLS = [["busybox", "sh"], ["dash"], ["bash"]]


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_tick_prints_its_usage_for_help_and_ticks_nothing(shell, tmp_path):
    # A stand-in qlshadow records any run: the tick's fallback would exec it.
    marker = tmp_path / "ran"
    cli = tmp_path / "qlshadow"
    cli.write_text(f'#!/bin/sh\necho "$@" > {marker}\n')
    cli.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "QL_DATA_DIR": str(tmp_path / "data"),
           "QL_CLI": str(cli), "QL_BASE_URL": "http://127.0.0.1:9"}

    result = subprocess.run([*shell, os.path.join(ROOT, "shell", "tick.sh"), "--help"],
                            capture_output=True, text=True, timeout=30, cwd=tmp_path, env=env)

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: tick.sh") and len(result.stdout.splitlines()) > 2
    assert result.stderr == ""
    assert not marker.exists() and sorted(os.listdir(tmp_path)) == ["qlshadow"]
