"""Every script a user runs answers --help: usage on stdout, exit 0, nothing else done
(the shell ones under BusyBox ash, dash and bash). scripts/build-ipk.sh has its own tests."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from helpers import ROOT

SHELLS = [["busybox", "sh"], ["dash"], ["bash"]]
SHELL_SCRIPTS = [os.path.join(ROOT, "scripts", "smoke.sh"), os.path.join(ROOT, "shell", "task.sh")]


def _is_program(path: str) -> bool:
    """A script with a __main__ block; scripts/harness.py is a module the others import."""
    with open(path, encoding="utf-8") as fh:
        return "__main__" in fh.read()


PYTHON_SCRIPTS = sorted(filter(_is_program, glob.glob(os.path.join(ROOT, "scripts", "*.py"))))


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=os.path.basename)
def test_a_shell_script_prints_its_usage_for_help(shell, script, tmp_path):
    result = subprocess.run([*shell, script, "--help"], capture_output=True, text=True,
                            timeout=30, cwd=tmp_path, env={"PATH": os.environ["PATH"]})

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: ") and len(result.stdout.splitlines()) > 2
    assert result.stderr == ""
    assert os.listdir(tmp_path) == []  # task.sh ran nothing: no log, no data dir


@pytest.mark.parametrize("script", PYTHON_SCRIPTS, ids=os.path.basename)
def test_a_python_script_prints_its_usage_for_help(script, tmp_path):
    result = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: ")
