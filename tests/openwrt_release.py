"""The packaged qlshadow run as on an OpenWrt release: that release's Python minor version,
isolated (-I -S: no site-packages, no PYTHON* variables), and every standard-library module
of an OpenWrt package our package does not declare hidden from import.

The hiding is a meta-path finder that a small bootstrap installs before anything else
imports (test-only: the package does not ship it). It stands in for the `python3` that
/usr/bin/qlshadow starts, refuses the hidden names with the ModuleNotFoundError a router
would give, and notes every module it hands out, so a test can map each one to the
OpenWrt package that installs it (scripts/pkgbuild/feeds.py, conf/openwrt/feeds/).
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.join(ROOT, "scripts") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "scripts"))

from pkgbuild import feeds, stage  # noqa: E402
from harness import Serve, free_port  # noqa: E402
from shellenv import IN_CI  # noqa: E402

PYENV = os.environ.get("QL_TEST_PYENV", "/root/.pyenv/versions")
# Built by CPython's test targets, which OpenWrt configures away (--disable-test-modules).
TEST_ONLY = ("test", "tests", "idle_test")
TEST_ONLY_EXTENSIONS = ("_test", "_ctypes_test", "_xxtestfuzz", "xxlimited", "xxsubtype")


def release_python(release: str) -> str:
    """An interpreter of the release's Python minor version (pyenv's), or skip."""
    minor = feeds.load(release)["python"]["major_minor"]
    found = sorted(glob.glob(os.path.join(PYENV, f"{minor}.*", "bin", f"python{minor}")))
    if not found:
        reason = f"no Python {minor} under {PYENV} (set QL_TEST_PYENV) for OpenWrt {release}"
        if IN_CI:
            pytest.fail(reason + " — required in CI")
        pytest.skip(reason)
    return found[-1]


# --- the package tree ----------------------------------------------------------------------

def stage_package(dest: Path, release: str) -> Path:
    """The files the package installs for a release, under dest (dest/usr/bin/qlshadow, ...),
    as scripts/pkgbuild stages them for both package formats."""
    stage.stage(dest, release)
    return dest


# --- the hidden standard library -----------------------------------------------------------

# Runs as the interpreter's script, before anything else of ours imports: only modules the
# interpreter itself loaded at start-up (all python3-base) are in use here. argv after it
# is what /usr/bin/qlshadow passes to python3: the interpreter options it uses (-B, -X
# pycache_prefix=DIR), then -c CODE ARGS... Each option takes effect as python3's would:
# through the sys attribute importlib reads when it writes byte code.
BOOTSTRAP = r'''
import posix
import sys


class HiddenStdlib:
    """Refuses the listed modules as a router without their package would; notes the rest."""

    def __init__(self, hidden, log_fd):
        self.hidden = hidden
        self.log_fd = log_fd

    def note(self, name, origin):
        posix.write(self.log_fd, f"{name} {origin}\n".encode())

    def find_spec(self, name, path=None, target=None):
        if name in self.hidden:
            self.note(name, "HIDDEN")
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                origin = spec.origin
                if origin is None:  # a namespace package: where its folder is
                    origin = (list(spec.submodule_search_locations or ()) or ["?"])[0] + "/"
                self.note(name, origin)
                return spec
        return None


def main():
    env = posix.environ
    with open(env[b"QLT_HIDDEN"], "rb") as fh:
        hidden = frozenset(fh.read().decode().split())
    fd = posix.open(env[b"QLT_LOADED"],
                    posix.O_WRONLY | posix.O_APPEND | posix.O_CREAT | posix.O_CLOEXEC, 0o600)
    finder = HiddenStdlib(hidden, fd)
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        finder.note(name, "STARTUP:" + str(getattr(spec, "origin", None)))
    sys.meta_path.insert(0, finder)
    args = sys.argv[1:]
    while args[:1] != ["-c"]:
        if args[:1] == ["-B"]:
            sys.dont_write_bytecode = True
            args = args[1:]
        elif args[:1] == ["-X"] and len(args) > 1 and args[1].startswith("pycache_prefix="):
            sys.pycache_prefix = args[1].partition("=")[2] or None
            args = args[2:]
        else:
            sys.exit(f"bootstrap: expected [-B] [-X pycache_prefix=DIR] -c CODE [ARGS...], "
                     f"not {args[:2]}")
    if len(args) < 2:
        sys.exit("bootstrap: -c needs CODE")
    sys.argv = ["-c", *args[2:]]
    code = compile(args[1], "<string>", "exec")
    exec(code, {"__name__": "__main__", "__builtins__": __builtins__})


main()
'''


def _module_name(rel: str) -> str | None:
    """The module a stdlib file is (relative path), None for other files."""
    parts = rel.split("/")
    if parts[0] == "lib-dynload" and len(parts) == 2 and parts[1].endswith(".so"):
        return parts[1].split(".", 1)[0]
    if not rel.endswith(".py") or "__pycache__" in parts:
        return None
    parts[-1] = parts[-1][:-3]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) if parts else None


def stdlib_files(python: str) -> tuple[str, list]:
    """The stdlib folder of python and every module file in it (site-packages left out)."""
    stdlib = subprocess.run([python, "-I", "-S", "-c", "import sys; print(sys._stdlib_dir)"],
                            capture_output=True, text=True, check=True).stdout.strip()
    files = []
    for folder, dirs, names in os.walk(stdlib):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "__pycache__"))
        for name in sorted(names):
            files.append(os.path.relpath(os.path.join(folder, name), stdlib))
    return stdlib, files


def allowed_packages(release: str) -> set:
    """The packages whose stdlib files may load: those declared, and the interpreter's own."""
    return set(feeds.depends(release)) | {"python3-base", "libpython3"}


def hidden_modules(release: str, python: str, allowed: set | None = None) -> list:
    """Every stdlib module of python that a router with only `allowed` lacks."""
    allowed = allowed_packages(release) if allowed is None else allowed
    stdlib, files = stdlib_files(python)
    hidden = set()
    for rel in files:
        name = _module_name(rel)
        if name is None:
            continue
        parts = rel.split("/")
        test_only = (any(p in TEST_ONLY for p in parts[:-1]) or
                     (parts[0] == "lib-dynload" and name.startswith(TEST_ONLY_EXTENSIONS)))
        if test_only or feeds.owner(release, os.path.join(stdlib, rel)) not in allowed:
            hidden.add(name)
    return sorted(hidden)


class RouterPython:
    """A `python3` for /usr/bin/qlshadow: release's minor, isolated, undeclared stdlib hidden."""

    def __init__(self, release: str, work: Path, allowed: set | None = None):
        self.release = release
        self.python = release_python(release)
        self.stdlib, _ = stdlib_files(self.python)
        self.bin_dir = work / "python-bin"
        self.bin_dir.mkdir(parents=True)
        self.bootstrap = work / "hidden_stdlib_bootstrap.py"
        self.bootstrap.write_text(BOOTSTRAP)
        self.hidden_list = work / "hidden-modules"
        self.hidden = hidden_modules(release, self.python, allowed)
        self.hidden_list.write_text("\n".join(self.hidden) + "\n")
        self.loaded_log = work / "loaded-modules"
        self.shim = self.bin_dir / "python3"
        self.shim.write_text(f"#!/bin/sh\nexec {self.python} -I -S {self.bootstrap} \"$@\"\n")
        self.shim.chmod(0o755)

    def env(self) -> dict:
        return {"QL_PYTHON": str(self.shim), "QLT_HIDDEN": str(self.hidden_list),
                "QLT_LOADED": str(self.loaded_log)}

    def records(self) -> list:
        """(module, origin) for every module handed out, HIDDEN for each refusal."""
        if not self.loaded_log.exists():
            return []
        rows = []
        for line in self.loaded_log.read_text().splitlines():
            name, _, origin = line.partition(" ")
            rows.append((name, origin.removeprefix("STARTUP:")))
        return rows

    def refused(self) -> set:
        return {name for name, origin in self.records() if origin == "HIDDEN"}

    def stdlib_owners(self, lib_dir: str) -> dict:
        """Each loaded stdlib module -> the OpenWrt package installing it; modules of the
        package itself (lib_dir) are left out, anything else outside the stdlib is an error."""
        owners = {}
        for name, origin in self.records():
            if origin == "HIDDEN" or name == "__main__":  # __main__: the bootstrap itself
                continue
            if origin in ("built-in", "frozen"):
                # Compiled into the interpreter (libpython3), or a frozen copy of a stdlib file.
                owners[name] = "libpython3" if origin == "built-in" else feeds.owner(self.release, name)
            elif origin.startswith(lib_dir + "/"):
                continue
            elif origin.startswith(self.stdlib + "/"):
                owners[name] = feeds.owner(self.release, origin)
            else:
                owners[name] = f"outside the stdlib and the package: {origin}"
        return owners


# --- running it ----------------------------------------------------------------------------

class RouterServer:
    """The staged package's /usr/bin/qlshadow on a RouterPython, with its own data folder."""

    def __init__(self, root: Path, python: RouterPython, data_dir: Path, **extra_env):
        self.root = root
        self.python = python
        self.bin = str(root / "usr" / "bin" / "qlshadow")
        self.conf = str(root / "etc" / "qlshadow" / "qlshadow.conf")
        self.lib = str(root / "usr" / "lib" / "qlshadow")
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("QL_", "QL3_", "PYTHON", "VIRTUAL_ENV"))}
        self.env.update({"PATH": f"{python.bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin",
                         "QL_DATA_DIR": str(data_dir), "QL_HOST": "127.0.0.1",
                         "QL_PORT": str(self.port), "QL_SCHEDULER": "node",
                         "QL_CRONTAB_INSTALL": "", **python.env(),
                         # The wrapper's byte code cache (RAM on a router), per test.
                         "QL_PYCACHE_DIR": str(data_dir.parent / "pycache")}, **extra_env)
        self.log = data_dir.parent / f"serve-{self.port}.log"
        self.process = None

    def cli(self, *args, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([self.bin, "--config", self.conf, *args], env={**self.env, **(env or {})},
                              cwd=str(self.data_dir.parent), capture_output=True, text=True,
                              timeout=120)

    def token(self) -> str:
        result = self.cli("token", "system")
        assert result.returncode == 0, result.stderr
        with open(result.stdout.strip()) as fh:
            return json.load(fh)["value"]

    def start(self) -> str:
        """Start serve; returns its start-up line."""
        self.serve = Serve([self.bin, "--config", self.conf, "serve"], env=self.env,
                           cwd=str(self.data_dir.parent), log_path=str(self.log), timeout=60,
                           grace=15).start()
        self.process = self.serve.process
        return self.serve.startup_line

    def stop(self) -> None:
        if self.process is not None:
            self.serve.stop()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def fetch(url: str, data: dict | None = None, cookie: str | None = None) -> tuple:
    """(status, headers, body) of one request, redirects not followed."""
    import urllib.error
    import urllib.parse
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    request = urllib.request.Request(url, data=body, headers={"Cookie": cookie} if cookie else {})
    opener = urllib.request.build_opener(_NoRedirect, urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=30) as reply:
            return reply.status, reply.headers, reply.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers, exc.read()
