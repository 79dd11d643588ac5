"""The README's walk-through, run as written: every `sh` block from "Quick start" to
"Letting crond run it", in a temporary directory with this installation as `.venv`, and
what each printed compared with the block the README shows after it.

The README's own shortenings are kept: `...` stands for any text, a number for any number
(but codes, states, exit codes and ids, which must be equal), a run id for any run id, and
`/srv/ql` for the directory it ran in. Everything else (keys,
words, their order, the lines and how many) must be as the README says. Port 5600 is
replaced by a free one, and the box's zone is UTC, as the README's tables say.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from helpers import ROOT, free_port

pytestmark = pytest.mark.skipif(
    not os.access(os.path.join(sys.prefix, "bin", "qlshadow"), os.X_OK),
    reason="the README runs .venv/bin/qlshadow: run the tests from the venv qlshadow is installed in")

README = os.path.join(ROOT, "README.md")
FIRST, LAST = "## Quick start", "### Letting crond run it"
MARK = "@@README-BLOCK@@"


def walk_through() -> list:
    """[(commands, shown output)] of the README's sh blocks between FIRST and LAST."""
    with open(README, encoding="utf-8") as fh:
        text = fh.read()
    text = text[text.index(FIRST):text.index(LAST)]
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", text, flags=re.M | re.S)
    pairs = []
    for i, (kind, body) in enumerate(blocks):
        if kind == "sh":
            shown = blocks[i + 1][1] if i + 1 < len(blocks) and blocks[i + 1][0] == "" else ""
            pairs.append((body, shown))
    return pairs


# Numbers after these are the README's point (codes, states, ids): they must be equal.
EXACT = ('"code":', '"status":', '"exit_code":', '"id":', '"cron_id":', '"seq":', "exit ")
_TOKEN = re.compile(r"\.\.\.|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
                    r"|[0-9]+(?:\.[0-9]+)*| +")


def pattern(line: str) -> re.Pattern:
    """A README output line as a regular expression (see the module's text)."""
    out, at = [], 0
    for m in _TOKEN.finditer(line):
        out.append(re.escape(line[at:m.start()]))
        part, at = m.group(), m.end()
        if part == "...":
            out.append(".*")
        elif part.strip() == "":
            out.append(" +")  # table columns are as wide as their values
        elif "-" in part:
            out.append("[0-9a-f]{8}-[0-9a-f-]{27}")
        elif line[:m.start()].endswith(EXACT):
            out.append(re.escape(part))
        else:
            out.append(r"[0-9]+(?:\.[0-9]+)*")
    out.append(re.escape(line[at:]))
    return re.compile("".join(out))


@pytest.fixture
def box(tmp_path):
    """A directory like the README's clone: `.venv` is this installation; crond on PATH."""
    os.symlink(sys.prefix, tmp_path / ".venv")
    bin_dir = tmp_path / "sbin"
    bin_dir.mkdir()
    crond = bin_dir / "crond"  # system mode, as on the README's box; nothing starts it
    crond.write_text("#!/bin/sh\nexit 1\n")
    crond.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tmp_path),
           "TZ": "UTC", "LANG": "C.UTF-8", "QL_PORT": str(free_port())}
    yield tmp_path, env


def run(script: str, cwd, env: dict, background: bool = False):
    argv = ["bash", "-c", script]
    if background:
        return subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def adapt(text: str, port: str) -> str:
    return text.replace("127.0.0.1:5600", f"127.0.0.1:{port}")


def compare(number: int, shown: str, printed: str, here: str, errors: str = "") -> None:
    real_venv = os.path.realpath(sys.prefix)
    printed = (printed.replace(real_venv, "/srv/ql/.venv")
               .replace(os.path.join(ROOT, "shell"), "/srv/ql/.venv/share/qlshadow/shell")
               .replace(here, "/srv/ql"))
    want, got = shown.splitlines(), printed.splitlines()
    assert len(got) == len(want), (f"block {number}: the README shows\n{shown}\nit printed\n"
                                   f"{printed}\n(stderr: {errors})")
    for w, g in zip(want, got, strict=True):
        assert pattern(w).fullmatch(g), f"block {number}: the README shows\n{w}\nit printed\n{g}"


def test_the_readme_walk_through_prints_what_the_readme_shows(box):
    here, env = box
    port = env["QL_PORT"]
    pairs = [(adapt(commands, port), adapt(shown, port)) for commands, shown in walk_through()]
    assert len(pairs) >= 9, "the README's walk-through lost its blocks"
    first_commands, first_shown = pairs[0]
    serve_line = [line for line in first_commands.splitlines() if "qlshadow serve" in line]
    assert serve_line == ["QL_CRONTAB_INSTALL= .venv/bin/qlshadow serve"]
    server = run(serve_line[0], here, env, background=True)
    try:
        compare(1, first_shown, server.stdout.readline(), str(here))
        # The blocks that talk to the first server, in one shell (they share TOKEN and ID).
        second = next(i for i, (commands, _) in enumerate(pairs) if "export QL_DATA_DIR" in commands)
        middle, later = pairs[1:second], pairs[second:]
        script = "".join(f"echo {MARK}\n{commands}" for commands, _ in middle)
        result = run(script, here, env)
        outputs = result.stdout.split(MARK + "\n")[1:]
        assert len(outputs) == len(middle), result.stderr
        for number, ((_, shown), printed) in enumerate(zip(middle, outputs, strict=True), start=2):
            compare(number, shown, printed, str(here), result.stderr)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        server.stdout.close()
    # Then the second server the README starts itself, on demo/; stopped by its PID.
    script = "".join(f"echo {MARK}\n{commands}" for commands, _ in later)
    script += f"echo {MARK}\nkill $SERVER; wait $SERVER\n"
    result = run(script, here, env)
    outputs = result.stdout.split(MARK + "\n")[1:-1]
    assert len(outputs) == len(later), result.stderr
    for number, ((_, shown), printed) in enumerate(zip(later, outputs, strict=True), start=2 + len(middle)):
        compare(number, shown, printed, str(here), result.stderr)
