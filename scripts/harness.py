"""The one process harness of tests and benches: `qlshadow serve` in a child process.

It picks a free loopback port when asked, starts the server with any argv, environment,
working directory or wrapper (qemu-user, a package's /usr/bin/qlshadow), waits for its
start-up line ("qlshadow serving http://HOST:PORT ..."), and stops it by its PID, never by
name, also when the body of the `with` fails. Tests import it as `harness` (setup.cfg puts
scripts/ on pytest's path); a bench under scripts/ has its own folder on sys.path already.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The first line `qlshadow serve` prints once it listens; the first URL is the first host.
STARTUP = re.compile(rb"qlshadow serving (http://(\S+):(\d+)) ")
# The start-up line of the benches' floor app (scripts/bench_children/floor_app.py).
FLOOR_STARTUP = re.compile(rb"floor serving (http://(\S+):(\d+))")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on at this moment (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def clean_env(env: dict | None = None) -> dict:
    """This process's environment without any QL_* / QL3_* setting, then env on top."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
    full.update({k: str(v) for k, v in (env or {}).items()})
    return full


def stop_process(process: subprocess.Popen, grace: float = 10) -> int | None:
    """Stop a process we started, by its PID: SIGTERM, then SIGKILL after grace seconds."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    return process.returncode


class Serve:
    """`qlshadow serve` in its own process; a context manager that always stops it.

    argv: the whole command (default: this Python's `-m qlshadow.cli serve`); wrapper: words
    put before it (e.g. ["qemu-arm", "-L", root]). env is complete as given (build it with
    clean_env). Output goes to a file, not a pipe: a pipe nobody drains would block the
    server. After start(): url, host, port, startup_line, process, pid; output() is the
    log of this start so far.
    """

    def __init__(self, argv: list | None = None, env: dict | None = None, cwd: str = ROOT,
                 wrapper: list | tuple = (), log_path: str | None = None, timeout: float = 30,
                 grace: float = 10, line: re.Pattern = STARTUP):
        self.line = line  # another server's start-up line (groups: url, host, port)
        self.argv = list(wrapper) + list(argv or [sys.executable, "-m", "qlshadow.cli", "serve"])
        self.env = env if env is not None else clean_env()
        self.cwd, self.timeout, self.grace = cwd, timeout, grace
        if log_path is None:
            folder = self.env.get("QL_DATA_DIR") or cwd
            log_path = os.path.join(folder, f"serve-{uuid.uuid4().hex[:8]}.log")
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self.url = self.host = None
        self.port = None
        self.returncode = None
        self.startup_line = ""  # the whole line the start-up pattern was found in
        self._offset = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    def start(self) -> Serve:
        """Spawn and wait for the start-up line; raises (with the output) if it never comes."""
        os.makedirs(os.path.dirname(os.path.abspath(self.log_path)), exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._offset = log.tell()
            self.process = subprocess.Popen(self.argv, env=self.env, cwd=self.cwd, stdout=log,
                                            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.timeout
        while True:
            match = self.line.search(self._read())
            if match:
                text = self._read()
                end = text.find(b"\n", match.end())
                self.startup_line = text[text.rfind(b"\n", 0, match.start()) + 1:
                                         end if end >= 0 else None].decode("utf-8", "replace")
                self.url = match.group(1).decode()
                self.host = match.group(2).decode()
                self.port = int(match.group(3))
                return self
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"qlshadow serve did not start ({' '.join(self.argv)}):\n"
                                   + self.output())
            time.sleep(0.005)

    def _read(self) -> bytes:
        with open(self.log_path, "rb") as fh:
            fh.seek(self._offset)
            return fh.read()

    def output(self) -> str:
        """What this run of the server printed so far."""
        return self._read().decode("utf-8", "replace")

    def stop(self) -> int | None:
        """Stop it by its PID (idempotent); returns its exit status."""
        if self.process is not None:
            self.returncode = stop_process(self.process, self.grace)
        return self.returncode

    def __enter__(self) -> Serve:
        return self.start() if self.process is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
