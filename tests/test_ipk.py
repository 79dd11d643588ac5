"""The OpenWrt 24.10 package (CONTRACT.md §14): scripts/build-ipk.sh builds an ipkg-build style
.ipk that unpacks with plain tar and gzip, and the unpacked tree runs on a bare Python 3.11
(the release's) with nothing installed, on the libraries it carries, writing nothing beside
its own files."""
from __future__ import annotations

import glob
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from qlshadow import __version__, config
from helpers import ROOT, Serve, free_port, http

sys.path.insert(0, os.path.join(ROOT, "scripts"))
from pkgbuild import stage  # noqa: E402  (scripts/ is not a package)

BUILD = os.path.join(ROOT, "scripts", "build-ipk.sh")
VERSION = f"{__version__}-r1"
SHELLS = [["busybox", "sh"], ["dash"], ["bash"]]


def build(out_dir) -> str:
    """Run build-ipk.sh into out_dir with this test's Python; returns the package path."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("SOURCE_DATE_EPOCH", "QL_PACKAGE_RELEASE")}
    env["PYTHON"] = sys.executable
    result = subprocess.run(["sh", BUILD, str(out_dir)], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    path = result.stdout.strip().splitlines()[-1]
    assert os.path.basename(path) == f"qlshadow_{VERSION}_all.ipk"
    return path


def untar(archive: str, into) -> None:
    """Unpack with the tar command, keeping modes, as opkg would on the router."""
    os.makedirs(into, exist_ok=True)
    subprocess.run(["tar", "-xpzf", archive, "-C", str(into)], check=True)


def listing(archive: str) -> list:
    """`tar -tv` lines of a .tar.gz, numeric owners, UTC: (mode, owner, "date time", name)."""
    out = subprocess.run(["tar", "--numeric-owner", "-tvzf", archive], check=True,
                         capture_output=True, text=True, env={**os.environ, "TZ": "UTC"}).stdout
    rows = []
    for line in out.splitlines():
        mode_, owner, _size, date, clock, name = line.split(None, 5)
        rows.append((mode_, owner, f"{date} {clock}", name))
    return rows


def names(archive: str) -> list:
    return [row[3] for row in listing(archive)]


def mode(path) -> int:
    return os.stat(path).st_mode & 0o7777


@pytest.fixture(scope="module")
def ipk(tmp_path_factory) -> dict:
    """The package built once for this module, unpacked into outer/, control/ and root/."""
    base = tmp_path_factory.mktemp("ipk")
    shells_at_build = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "shell", "*.sh")))
    path = build(base / "dist")
    untar(path, base / "outer")
    untar(str(base / "outer" / "control.tar.gz"), base / "control")
    untar(str(base / "outer" / "data.tar.gz"), base / "root")
    return {"path": path, "outer": base / "outer", "control": base / "control",
            "root": base / "root", "shells": shells_at_build}


def control_fields(ipk) -> dict:
    fields, last = {}, None
    for line in (ipk["control"] / "control").read_text().splitlines():
        if line.startswith(" ") and last:
            fields[last] += "\n" + line.strip()
        else:
            last, _, value = line.partition(":")
            fields[last] = value.strip()
    return fields


# --- layout --------------------------------------------------------------------------------

def test_the_package_is_a_gzipped_tar_of_debian_binary_data_and_control(ipk):
    assert names(ipk["path"]) == ["./debian-binary", "./data.tar.gz", "./control.tar.gz"]
    assert (ipk["outer"] / "debian-binary").read_bytes() == b"2.0\n"


def test_busybox_tar_unpacks_the_package(ipk, tmp_path):
    subprocess.run(["busybox", "tar", "-xzf", ipk["path"], "-C", str(tmp_path)], check=True)
    subprocess.run(["busybox", "tar", "-xzf", str(tmp_path / "data.tar.gz"), "-C", str(tmp_path)],
                   check=True)

    assert (tmp_path / "usr" / "lib" / "qlshadow" / "qlshadow" / "cli" / "__init__.py").is_file()


def test_the_control_fields_name_the_package_version_and_dependencies(ipk):
    fields = control_fields(ipk)

    assert fields["Package"] == "qlshadow"
    assert fields["Version"] == VERSION
    assert fields["Architecture"] == "all"
    depends = [d.strip() for d in fields["Depends"].split(",")]
    assert depends == stage.depends("24.10")
    # The libraries are carried, not depended on; nor is the full python3 (python3-flask
    # pulled it and setuptools in).
    assert not [d for d in depends if not d.startswith("python3-") or d.endswith(
        ("flask", "werkzeug", "jinja2", "click", "setuptools", "peewee", "waitress"))]
    assert "python3" not in depends
    assert fields["Maintainer"] and fields["Section"] and fields["Description"]


def test_installed_size_is_the_byte_size_of_the_unpacked_data_as_ipkg_build_counts_it(ipk):
    with gzip.open(ipk["outer"] / "data.tar.gz", "rb") as fh:
        size = len(fh.read())

    assert control_fields(ipk)["Installed-Size"] == str(size)


def test_conffiles_lists_both_config_files_and_they_are_in_the_package(ipk):
    conffiles = (ipk["control"] / "conffiles").read_text().splitlines()

    assert conffiles == ["/etc/config/qlshadow", "/etc/qlshadow/qlshadow.conf"]
    for path in conffiles:
        assert (ipk["root"] / path.lstrip("/")).is_file()


def test_the_control_archive_holds_control_conffiles_and_maintainer_scripts(ipk):
    members = sorted(names(str(ipk["outer"] / "control.tar.gz")))

    assert members == ["./", "./conffiles", "./control", "./postinst", "./postinst-pkg",
                       "./prerm", "./prerm-pkg"]
    for script in ("postinst", "postinst-pkg", "prerm", "prerm-pkg"):
        assert mode(ipk["control"] / script) == 0o755


def test_the_maintainer_scripts_are_openwrts_wrappers_around_the_package_parts(ipk):
    # As include/package-pack.mk: postinst and prerm call default_postinst / default_prerm
    # from /lib/functions.sh, which run <package>.postinst-pkg / .prerm-pkg from opkg's info
    # folder and then start (stop) the package's init scripts.
    postinst = (ipk["control"] / "postinst").read_text()
    prerm = (ipk["control"] / "prerm").read_text()

    assert ". ${IPKG_INSTROOT}/lib/functions.sh\ndefault_postinst $0 $@\n" in postinst
    assert ". ${IPKG_INSTROOT}/lib/functions.sh\ndefault_prerm $0 $@\n" in prerm
    with open(os.path.join(ROOT, "conf", "openwrt", "postinst"), "rb") as fh:
        assert (ipk["control"] / "postinst-pkg").read_bytes() == fh.read()
    with open(os.path.join(ROOT, "conf", "openwrt", "prerm"), "rb") as fh:
        assert (ipk["control"] / "prerm-pkg").read_bytes() == fh.read()
    assert mode(ipk["control"] / "control") == 0o644


def source_date() -> str:
    """The build's default SOURCE_DATE_EPOCH (last commit, else 1980-01-01) as tar -tv shows it."""
    result = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%ct"], capture_output=True,
                            text=True)
    epoch = int(result.stdout.strip()) if result.returncode == 0 and result.stdout.strip() else 315532800
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(epoch))


def test_every_member_is_owned_by_root_and_dated_from_the_last_commit(ipk):
    for archive in (ipk["path"], str(ipk["outer"] / "control.tar.gz"),
                    str(ipk["outer"] / "data.tar.gz")):
        rows = listing(archive)
        assert {owner for _, owner, _, _ in rows} == {"0/0"}, archive
        assert {stamp for _, _, stamp, _ in rows} == {source_date()}, archive


def test_data_holds_the_app_the_shell_scripts_and_the_bundled_libraries(ipk):
    lib = ipk["root"] / "usr" / "lib" / "qlshadow"
    # The source folder app/ is shipped under its import name, qlshadow/, less msgfmt.py
    # (it compiles a .po with no .mo; the package ships the .mo).
    app_sources = sorted(os.path.relpath(p, os.path.join(ROOT, "app")) for p in
                         glob.glob(os.path.join(ROOT, "app", "**", "*.py"), recursive=True)
                         if not p.endswith(os.sep + "msgfmt.py"))

    packaged = sorted(str(p.relative_to(lib / "qlshadow")) for p in (lib / "qlshadow").rglob("*.py"))
    assert packaged == app_sources
    assert sorted(p.name for p in (lib / "shell").glob("*.sh")) == ipk["shells"]
    for module in ("peewee.py", "playhouse/migrate.py", "waitress/server.py",
                   "cronsim/cronsim.py", "flask/app.py", "werkzeug/utils.py",
                   "jinja2/environment.py", "markupsafe/_native.py", "itsdangerous/signer.py",
                   "click/core.py", "blinker/base.py"):
        assert (lib / "vendor" / module).is_file(), module
    for bundle in stage.read_bundled():
        assert (lib / "vendor" / f"LICENSE.{bundle.name}").is_file()
        metadata = lib / "vendor" / f"{bundle.name}-{bundle.version}.dist-info" / "METADATA"
        assert f"\nVersion: {bundle.version}\n" in metadata.read_text()
    # MarkupSafe runs on its pure-Python fallback; nothing native is carried.
    assert not list(lib.rglob("*.so"))


def test_data_holds_the_status_page_templates(ipk):
    lib = ipk["root"] / "usr" / "lib" / "qlshadow" / "qlshadow"
    templates = sorted(os.path.basename(p)
                       for p in glob.glob(os.path.join(ROOT, "app", "templates", "*.html")))
    assert templates and sorted(p.name for p in (lib / "templates").glob("*.html")) == templates
    assert mode(lib / "templates" / "base.html") == 0o644


def test_data_holds_the_compiled_chinese_catalog_and_not_its_source(ipk):
    from qlshadow import msgfmt
    folder = ipk["root"] / "usr" / "lib" / "qlshadow" / "qlshadow" / "locale" / "zh_CN" / "LC_MESSAGES"
    assert sorted(p.name for p in folder.iterdir()) == ["qlshadow.mo"]
    assert mode(folder / "qlshadow.mo") == 0o644
    with open(os.path.join(ROOT, "app", "locale", "zh_CN", "LC_MESSAGES", "qlshadow.po"),
              encoding="utf-8") as fh:
        assert (folder / "qlshadow.mo").read_bytes() == msgfmt.compile_mo(msgfmt.parse(fh.read()))


def test_python_modules_ship_as_sources_without_byte_code(ipk):
    members = names(str(ipk["outer"] / "data.tar.gz"))

    assert not [n for n in members if "__pycache__" in n or n.endswith((".pyc", ".pyo"))]


def test_scripts_are_executable_and_config_files_are_not(ipk):
    root = ipk["root"]

    assert mode(root / "usr" / "bin" / "qlshadow") == 0o755
    assert mode(root / "etc" / "init.d" / "qlshadow") == 0o755
    assert mode(root / "usr" / "lib" / "qlshadow" / "smoke.sh") == 0o755
    for script in (root / "usr" / "lib" / "qlshadow" / "shell").glob("*.sh"):
        assert mode(script) == 0o755, script
    assert mode(root / "etc" / "config" / "qlshadow") == 0o644
    # May hold a database password.
    assert mode(root / "etc" / "qlshadow" / "qlshadow.conf") == 0o600
    assert mode(root / "usr" / "lib" / "qlshadow" / "qlshadow" / "cli" / "__init__.py") == 0o644


def test_every_directory_is_0755_including_the_root_entry(ipk):
    # A 0700 "./" entry would change the mode of / on the router.
    dirs = [(m, name) for m, _, _, name in listing(str(ipk["outer"] / "data.tar.gz"))
            if m.startswith("d")]

    assert ("drwxr-xr-x", "./") in dirs
    assert {m for m, _ in dirs} == {"drwxr-xr-x"}


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
@pytest.mark.parametrize("script", ["control/postinst", "control/prerm", "control/postinst-pkg",
                                    "control/prerm-pkg",
                                    "root/etc/init.d/qlshadow", "root/usr/bin/qlshadow",
                                    "root/usr/lib/qlshadow/smoke.sh"])
def test_maintainer_and_init_scripts_parse_under_every_shell(ipk, shell, script):
    where, _, rel = script.partition("/")
    result = subprocess.run([*shell, "-n", str(ipk[where] / rel)], capture_output=True, text=True)

    assert result.returncode == 0, result.stderr


def test_the_init_script_is_the_procd_one(ipk):
    text = (ipk["root"] / "etc" / "init.d" / "qlshadow").read_text()

    assert text.startswith("#!/bin/sh /etc/rc.common\n")
    assert "USE_PROCD=1" in text


def test_the_packaged_config_keeps_data_on_persistent_flash(ipk):
    conf = ipk["root"] / "etc" / "qlshadow" / "qlshadow.conf"

    settings = config.load(environ={}, config_file=str(conf))

    assert settings.data_dir == "/srv/qlshadow"
    assert settings.db_url == "sqlite:////srv/qlshadow/qlshadow.db"


def test_the_default_config_names_every_setting_and_loads():
    path = os.path.join(ROOT, "conf", "qlshadow.conf")
    with open(path, encoding="utf-8") as fh:
        text = fh.read()

    missing = [key for key in sorted(config.FILE_KEYS)
               if not re.search(rf"^#?{key}=", text, re.MULTILINE)]
    assert missing == []
    assert config.load(environ={}, config_file=path).data_dir == "/var/lib/qlshadow"


def test_building_twice_gives_identical_bytes(ipk, tmp_path):
    again = build(tmp_path / "again")

    with open(ipk["path"], "rb") as first, open(again, "rb") as second:
        assert first.read() == second.read()


# --- the unpacked tree, run on the release's Python with nothing installed ------------------

@pytest.fixture(scope="session")
def release_python() -> str:
    """A Python of 24.10's minor version (3.11)."""
    return stage.find_python("24.10")


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory, release_python) -> str:
    """A throwaway venv of that Python with nothing installed."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([release_python, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    for module in ("flask", "peewee", "waitress"):
        probe = subprocess.run([python, "-c", f"import {module}"], capture_output=True)
        assert probe.returncode != 0, f"{module} must not be installed in the bare venv"
    return python


class PackagedServer:
    """`/usr/bin/qlshadow serve` of the unpacked package, with its own config, on a free port."""

    def __init__(self, root, python: str, data_dir, extra_env: dict):
        self.root = root
        self.bin = str(root / "usr" / "bin" / "qlshadow")
        self.conf = str(root / "etc" / "qlshadow" / "qlshadow.conf")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("QL_", "QL3_", "PYTHON"))}
        self.env.update({"PATH": f"{os.path.dirname(python)}:/usr/bin:/bin",
                         "QL_DATA_DIR": str(data_dir), "QL_HOST": "127.0.0.1",
                         "QL_PORT": str(self.port), "QL_SCHEDULER": "node",
                         "QL_CRONTAB_INSTALL": "",
                         "QL_PYCACHE_DIR": str(data_dir.parent / f"pycache-{self.port}")},
                        **extra_env)
        self.pycache = self.env["QL_PYCACHE_DIR"]
        self.log = data_dir.parent / f"serve-{self.port}.log"
        self.process = None

    def cli(self, *args) -> subprocess.CompletedProcess:
        return subprocess.run([self.bin, "--config", self.conf, *args], env=self.env,
                              cwd=str(self.root), capture_output=True, text=True, timeout=60)

    def token(self) -> str:
        result = self.cli("token", "system")
        assert result.returncode == 0, result.stderr
        with open(result.stdout.strip()) as fh:
            return json.load(fh)["value"]

    def start(self) -> None:
        self.process = Serve([self.bin, "--config", self.conf, "serve"], env=self.env,
                             cwd=str(self.root), log_path=str(self.log)).start().process

    def stop(self, sig=signal.SIGTERM) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@pytest.fixture
def packaged(ipk, bare_python, tmp_path):
    """Start servers from the unpacked package; stopped by PID at teardown."""
    servers = []

    def start(**env) -> PackagedServer:
        server = PackagedServer(ipk["root"], bare_python,
                                tmp_path / f"data-{len(servers)}", env)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


PROBE = """\
import atexit, os, sys

def _report():
    with open(os.environ["PROBE_OUT"], "w") as fh:
        for name in ("qlshadow", "peewee", "waitress", "flask", "werkzeug", "jinja2",
                     "markupsafe", "blinker"):
            module = sys.modules.get(name)
            fh.write(f"{name} {getattr(module, '__file__', None)}\\n")

atexit.register(_report)
"""


def test_the_installed_service_runs_on_the_libraries_it_carries(packaged, tmp_path):
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    (probe_dir / "sitecustomize.py").write_text(PROBE)
    server = packaged()
    server.env.update(PYTHONPATH=str(probe_dir), PROBE_OUT=str(tmp_path / "modules"))
    server.start()

    status, body = http("GET", server.url + "/health")
    page_status, page = http("GET", server.url + "/page/login")
    zh_status, zh_page = http("GET", server.url + "/page/login?lang=zh_CN")
    # SIGINT ends serve normally, so the probe's exit hook writes what was imported.
    server.stop(signal.SIGINT)

    assert status == 200 and body["data"]["db"] == "ok"
    assert page_status == 200 and b"<h1>Sign in</h1>" in page  # templates found in the package
    assert zh_status == 200 and "<h1>登录</h1>" in zh_page.decode()  # and the compiled catalog
    modules = dict(line.split(" ", 1) for line in (tmp_path / "modules").read_text().splitlines())
    lib = str(server.root / "usr" / "lib" / "qlshadow")
    assert modules["peewee"] == lib + "/vendor/peewee.py"
    assert modules["qlshadow"] == lib + "/qlshadow/__init__.py"
    for name in ("waitress", "flask", "werkzeug", "jinja2", "markupsafe", "blinker"):
        assert modules[name] == f"{lib}/vendor/{name}/__init__.py"


def test_the_installed_reconcile_command_runs_on_the_bundled_cronsim(packaged):
    server = packaged()
    assert server.cli("cron", "add", "*/5 * * * *", "true").returncode == 0
    # The cron is new, so nothing is judged yet: the gate says what it needs, which asks
    # cronsim (absent from this Python) for the next firing.
    result = server.cli("reconcile", "--json")

    assert result.returncode == 3, result.stderr
    (report,) = json.loads(result.stdout)["data"]["crons"]
    assert "needs a window that covers at least one firing, e.g. the one at" in report["reasons"][0]


@pytest.mark.parametrize("shadow", ["on", "off"])
def test_the_smoke_check_passes_against_the_installed_service(packaged, shadow):
    server = packaged(QL3_SHADOW_ORIGINS="scheduled_system" if shadow == "on" else "")
    token = server.token()
    server.start()
    smoke = str(server.root / "usr" / "lib" / "qlshadow" / "smoke.sh")

    result = subprocess.run(["busybox", "sh", smoke, server.url, token], capture_output=True,
                            text=True, timeout=120)

    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert not [line for line in lines if line.startswith("FAIL")]
    if shadow == "on":
        assert [line for line in lines if line.startswith("ok - Shadow Run for legacy-system:")]
    else:
        assert [line for line in lines if line.startswith("skip - Shadow Run check skipped")]


def snapshot(folder) -> dict:
    """Every path under folder with its size and mtime."""
    found = {}
    for base, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(base, name)
            info = os.lstat(path)
            found[os.path.relpath(path, folder)] = (info.st_size, info.st_mtime_ns)
    return found


def test_serving_callbacks_writes_nothing_under_the_packages_lib_dir(packaged):
    # On a router /usr/lib/qlshadow is flash: no byte code, cache or state may land there.
    # The byte code Python compiles from the shipped sources goes to the wrapper's cache
    # folder (RAM, /tmp, on a router).
    server = packaged(QL3_SHADOW_ORIGINS="scheduled_system")
    lib = server.root / "usr" / "lib" / "qlshadow"
    token = server.token()
    before = snapshot(lib)
    server.start()
    result = subprocess.run(["busybox", "sh", str(lib / "smoke.sh"), server.url, token],
                            capture_output=True, text=True, timeout=120)
    server.stop()
    assert server.cli("reconcile", "--json").returncode in (0, 3)

    assert result.returncode == 0, result.stdout + result.stderr
    assert [line for line in result.stdout.splitlines() if line.startswith("ok - Shadow Run")]
    assert snapshot(lib) == before
    cached = {os.path.relpath(os.path.join(base, name), server.pycache)
              for base, _, names in os.walk(server.pycache) for name in names}
    assert (str(lib / "qlshadow").lstrip("/") + "/cli/__init__.cpython-"
            f"{sys.version_info[0]}{sys.version_info[1]}.pyc") in cached


def test_without_a_cache_folder_of_its_own_the_wrapper_writes_no_byte_code(packaged, tmp_path):
    # A cache folder that is a symbolic link (or another user's) is not used: its byte
    # code would be run. Python then compiles in memory (-B) and writes nowhere.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cache-link").symlink_to(elsewhere)
    server = packaged(QL_PYCACHE_DIR=str(tmp_path / "cache-link"))
    lib = server.root / "usr" / "lib" / "qlshadow"
    before = snapshot(lib)

    assert server.cli("token", "system").returncode == 0

    assert snapshot(lib) == before
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
@pytest.mark.parametrize("case", ["fresh", "existing", "symlink", "other-user", "empty"])
def test_the_wrapper_caches_byte_code_only_in_a_folder_of_its_own(shell, case, tmp_path):
    # A stand-in python3 records how the wrapper runs it.
    python = tmp_path / "python3"
    python.write_text('#!/bin/sh\nprintf "%s\\n" "$1" "$2" > "$0.args"\n')
    python.chmod(0o755)
    cache = tmp_path / "cache"
    if case == "existing":
        cache.mkdir(mode=0o700)
    elif case == "symlink":
        (tmp_path / "target").mkdir()
        cache.symlink_to(tmp_path / "target")
    elif case == "other-user":
        if os.geteuid() != 0:
            pytest.skip("giving a folder to another user needs root")
        cache.mkdir()
        os.chown(cache, 65534, 65534)
    env = {"PATH": os.environ["PATH"], "QL_PYTHON": str(python), "QL_LIB_DIR": str(tmp_path),
           "QL_PYCACHE_DIR": "" if case == "empty" else str(cache)}

    subprocess.run([*shell, os.path.join(ROOT, "conf", "qlshadow-wrapper.sh"), "--help"],
                   env=env, check=True, timeout=30)

    args = (tmp_path / "python3.args").read_text().splitlines()
    if case in ("fresh", "existing"):
        assert args == ["-X", f"pycache_prefix={cache}"]
        assert cache.stat().st_mode & 0o777 == 0o700
    else:
        assert args == ["-B", "-c"]
        assert not (tmp_path / "target").exists() or not list((tmp_path / "target").iterdir())
