"""The package on each supported OpenWrt release's Python, with only what it declares.

For 24.10 (Python 3.11) and 25.12 (Python 3.13) the package tree runs on an interpreter of
that minor version, isolated, with every standard-library module of an OpenWrt package not
in its Depends hidden from import (tests/openwrt_release.py). Under that, serve, the smoke
check, a crond callback pair, the status page and `qlshadow notify --test` all work, and
every stdlib module they load belongs to a declared package (conf/openwrt/feeds/).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import http
from openwrt_release import (ROOT, RouterPython, RouterServer, allowed_packages, feeds, fetch,
                             stage_package)
from shellenv import SYSTEM_PATH, busybox_static
from test_notify_channels import SmtpServer

RELEASES = feeds.RELEASES


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    """The package tree staged once per release for this module."""
    staged: dict = {}

    def tree(release: str):
        if release not in staged:
            staged[release] = stage_package(tmp_path_factory.mktemp(f"root-{release}"), release)
        return staged[release]
    return tree


@pytest.fixture
def router(trees, tmp_path):
    """router(release, **env) -> a RouterServer (not started); all stopped by PID at teardown."""
    servers = []

    def make(release: str, allowed: set | None = None, **env) -> RouterServer:
        work = tmp_path / f"{release}-{len(servers)}"
        python = RouterPython(release, work, allowed)
        (work / "data").mkdir()
        server = RouterServer(trees(release), python, work / "data", **env)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def smtp_server():
    server = SmtpServer()
    yield server
    server.close()


def webhook_env(url: str) -> dict:
    return {"WEBHOOK_URL": f"{url}/hook", "WEBHOOK_METHOD": "POST",
            "WEBHOOK_CONTENT_TYPE": "application/json",
            "WEBHOOK_BODY": "title: $title\ncontent: $content"}


def undeclared(server: RouterServer) -> dict:
    """Loaded stdlib modules whose OpenWrt package the package does not declare."""
    allowed = allowed_packages(server.python.release)
    owners = server.python.stdlib_owners(server.lib)
    return {name: owner for name, owner in owners.items() if owner not in allowed}


# --- the feed records ------------------------------------------------------------------------

@pytest.mark.parametrize("release, python, commit", [
    ("24.10", "3.11.14", "42525d32c41080d8a2a9f1b7929f4207427d5ce8"),
    ("25.12", "3.13.9", "57654a9f48f82a2163a36de4123c2537abb5fce8"),
])
def test_each_release_record_names_its_feed_commit_and_python(release, python, commit):
    record = feeds.load(release)

    assert record["feed"]["commit"] == commit
    assert record["python"]["version"] == python
    assert record["python"]["stdlib_dir"] == f"/usr/lib/python{python.rsplit('.', 1)[0]}"


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("module, package", [
    ("email.parser", "python3-email"), ("_ssl", "python3-openssl"), ("ssl", "python3-light"),
    ("_sqlite3", "python3-sqlite3"), ("sqlite3.dbapi2", "python3-sqlite3"),
    ("decimal", "python3-decimal"), ("logging.handlers", "python3-logging"),
    ("urllib.parse", "python3-urllib"), ("unicodedata", "python3-codecs"),
    ("encodings.utf_8", "python3-base"), ("os", "python3-base"), ("json", "python3-light"),
    ("idlelib", None), ("webbrowser", None), ("test.support", None),
])
def test_owner_maps_a_module_name_to_the_package_that_installs_it(release, module, package):
    assert feeds.owner(release, module) == package


def test_owner_maps_any_pythons_stdlib_path_and_byte_code_by_the_routers_path():
    assert feeds.owner("24.10", "/opt/py/lib/python3.11/lib-dynload/_ssl.cpython-311-x86_64-linux-gnu.so") \
        == "python3-openssl"
    assert feeds.owner("25.12", "/usr/lib/python3.13/email/__init__.pyc") == "python3-email"
    assert feeds.owner("25.12", "/usr/lib/python3.13/sysconfig/__init__.py") == "python3-base"
    assert feeds.owner("24.10", "/usr/lib/python3.11/lib-dynload/_json.cpython-311-mips.so") \
        == "python3-light"
    with pytest.raises(ValueError, match="site-packages"):
        feeds.owner("24.10", "/usr/lib/python3.11/site-packages/flask/app.py")
    with pytest.raises(ValueError, match="lib/python3.11"):
        feeds.owner("24.10", "/usr/lib/python3.13/json/__init__.py")


@pytest.mark.parametrize("release", RELEASES)
def test_the_package_depends_on_python3_light_and_split_stdlib_packages_of_the_feed(release):
    record = feeds.load(release)
    declared = feeds.depends(release)

    assert declared[0] == "python3-light"
    assert all(record["packages"][name]["kind"] == "stdlib" for name in declared)
    # Their closure stays clear of the full python3 and of setuptools.
    closure = feeds.closure(release, declared)
    assert "python3" not in closure and "python3-setuptools" not in closure
    assert "libpython3" in closure


def test_the_records_are_what_derive_makes_of_the_full_feed_read(tmp_path):
    full = "/work/shared/openwrt/feeds.json"
    if not os.path.exists(full):
        pytest.skip(f"{full} (the full read of the feeds) is not on this machine")
    feeds.derive(full, str(tmp_path))

    for release in RELEASES:
        with open(os.path.join(feeds.FEEDS_DIR, f"{release}.json")) as fh:
            committed = json.load(fh)
        assert json.loads((tmp_path / f"{release}.json").read_text()) == committed


# --- the hidden standard library --------------------------------------------------------------

@pytest.mark.parametrize("release", RELEASES)
def test_a_module_of_an_undeclared_package_cannot_be_imported(release, tmp_path):
    python = RouterPython(release, tmp_path)
    probe = ("import sys\n"
             "for name in ('email', 'json', '_ssl', 'asyncio', 'sqlite3'):\n"
             "    try:\n"
             "        __import__(name)\n"
             "        print(name, 'ok')\n"
             "    except ModuleNotFoundError:\n"
             "        print(name, 'missing')\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}, **python.env()}

    result = subprocess.run([str(python.shim), "-c", probe], env=env, capture_output=True,
                            text=True, timeout=60)

    assert result.returncode == 0, result.stderr
    assert dict(line.split() for line in result.stdout.splitlines()) == {
        "email": "ok", "json": "ok", "_ssl": "missing", "asyncio": "missing", "sqlite3": "ok"}
    assert {"_ssl", "asyncio"} <= python.refused()
    assert sys_version(python) == feeds.load(release)["python"]["major_minor"]


def sys_version(python: RouterPython) -> str:
    out = subprocess.run([python.python, "-I", "-S", "-c",
                          "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, check=True).stdout
    return out.strip()


@pytest.mark.parametrize("release", RELEASES)
def test_without_python3_logging_the_package_cannot_start(release, router):
    # The hiding is what makes the other tests mean something: take away one declared
    # package and the product fails the way a router without it would.
    server = router(release, allowed=allowed_packages(release) - {"python3-logging"})

    result = server.cli("token", "system")

    assert result.returncode != 0
    assert "No module named 'logging'" in result.stderr


# --- the product, run as on the router ---------------------------------------------------------

@pytest.mark.parametrize("release", RELEASES)
def test_the_package_serves_callbacks_pages_and_notifications_on_only_its_declared_stdlib(
        release, router, receiver):
    server = router(release, QL3_SHADOW_ORIGINS="scheduled_system")
    token = server.token()
    headers = {"Authorization": f"Bearer {token}"}

    line = server.start()
    assert line.startswith(f"qlshadow serving http://127.0.0.1:{server.port}")

    smoke = subprocess.run([busybox_static(), "sh", os.path.join(server.lib, "smoke.sh"), server.url,
                            token], capture_output=True, text=True, timeout=120)
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert "ok - Shadow Run for" in smoke.stdout

    # A callback pair as crond runs a task: task.sh with the origin marker makes the
    # execution id; its token is refreshed first through the packaged CLI.
    status, body = http("POST", f"{server.url}/open/crons",
                        {"name": "router job", "command": "exit 3", "schedule": "0 0 1 1 *"}, headers)
    assert status == 200, body
    cron_id = body["data"]["id"]
    token_file = server.data_dir / "runner-token.json"
    if token_file.exists():
        token_file.unlink()
    task_env = {"PATH": f"{server.python.bin_dir}:{SYSTEM_PATH}", "SHELL": "/bin/sh",
                "ID": str(cron_id), "QL_DATA_DIR": str(server.data_dir),
                "QL_EXECUTION_ORIGIN": "scheduled_system", "QL_BASE_URL": server.url,
                "QL_CLI": f"{server.bin} --config {server.conf}",
                "QL_PYCACHE_DIR": server.env["QL_PYCACHE_DIR"],
                **{k: v for k, v in server.python.env().items() if k != "QL_PYTHON"}}
    task = subprocess.run([busybox_static(), "sh", os.path.join(server.lib, "shell", "task.sh"),
                           "exit 3"], env=task_env, capture_output=True, text=True, timeout=120)
    assert task.returncode == 3, task.stderr
    assert token_file.exists()
    status, body = http("GET", f"{server.url}/open/runs?cron_id={cron_id}", headers=headers)
    assert status == 200, body
    [run] = body["data"]
    assert (run["state"], run["exit_code"]) == ("exited", 3)
    assert run["idempotency_key"].startswith("legacy-system:")

    # The status page, signed in with the token.
    status, reply_headers, _ = fetch(f"{server.url}/page/login", {"token": token})
    assert status == 303
    cookie = reply_headers["Set-Cookie"].split(";", 1)[0]
    status, _, page = fetch(f"{server.url}/page/", cookie=cookie)
    assert status == 200 and b"router job" in page
    status, _, page = fetch(f"{server.url}/page/crons/{cron_id}", cookie=cookie)
    assert status == 200 and b"router job" in page

    notified = server.cli("notify", "--test", env=webhook_env(receiver.url))
    assert notified.returncode == 0, notified.stdout + notified.stderr
    assert notified.stdout.startswith("webhook: ok: HTTP 200")
    assert json.loads(receiver.last["body"])["title"] == "qlshadow: test notification"

    server.stop()
    assert undeclared(server) == {}
    # python3-codecs is not declared: its unicodedata was asked for and refused, and the
    # package's bootstrap stood in (test_without_python3_codecs_...).
    assert "python3-codecs" not in feeds.depends(release)
    assert "unicodedata" in server.python.refused()
    # Nor python3-decimal: peewee's and Flask's load-time imports got the stand-in.
    assert "python3-decimal" not in feeds.depends(release)
    assert "decimal" in server.python.refused()
    # Each declared package is one the product loads: none is there for nothing.
    owners = set(server.python.stdlib_owners(server.lib).values())
    assert set(feeds.depends(release)) <= owners


@pytest.mark.parametrize("release", RELEASES)
def test_notify_mails_through_smtp_on_the_declared_stdlib(release, router, smtp_server):
    server = router(release)
    env = {"SMTP_SERVER": smtp_server.address, "SMTP_SSL": "false",
           "SMTP_EMAIL": "ops@example.org", "SMTP_PASSWORD": "app-pw", "SMTP_NAME": "router"}

    result = server.cli("notify", "--test", env=env)

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "smtp: ok: SMTP accepted (settings from the environment)"
    [sent] = smtp_server.messages
    assert b"Subject: qlshadow: test notification" in sent["data"]
    assert undeclared(server) == {}


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("channel, what", [("webhook", "https"), ("smtp", "SMTP over SSL")])
def test_notify_over_tls_without_python3_openssl_names_the_package_to_add(
        release, router, receiver, channel, what):
    server = router(release)
    if channel == "webhook":
        env = webhook_env(receiver.url.replace("http:", "https:"))
    else:
        env = {"SMTP_SERVER": "127.0.0.1:1", "SMTP_SSL": "true", "SMTP_EMAIL": "ops@example.org"}

    result = server.cli("notify", "--test", env=env)

    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{channel}: FAILED: {what} needs the OpenWrt package python3-openssl "
        "(opkg install python3-openssl / apk add python3-openssl) "
        "(settings from the environment)"]
    assert "_ssl" in server.python.refused()
    assert receiver.requests == []
    assert undeclared(server) == {}


CODECS_PROBE = """
import socket, sys
lib = sys.argv[1]
sys.path[:0] = [lib, lib + "/vendor"]
import qlshadow_boot

def attempt(what, call):
    try:
        print(what, "ok", call())
    except Exception as exc:
        print(what, type(exc).__name__, exc)

print("stand-ins", sys.modules["unicodedata"].__name__ == "unicodedata" and
      not hasattr(sys.modules["unicodedata"], "ucd_3_2_0"))
attempt("localhost", lambda: sorted({a[4][0] for a in socket.getaddrinfo(
    "localhost", 80, type=socket.SOCK_STREAM)} & {"127.0.0.1", "::1"}) != [])
attempt("ascii", lambda: "Example.org.".encode("idna"))
attempt("empty-label", lambda: "a..b".encode("idna"))
attempt("non-ascii", lambda: "b\u00fccher.example".encode("idna"))
attempt("resolve-non-ascii", lambda: socket.getaddrinfo("b\u00fccher.example", 80))
attempt("punycode", lambda: b"xn--bcher-kva.example".decode("idna"))
from werkzeug.utils import secure_filename
attempt("secure_filename", lambda: secure_filename("a b.txt"))
from qlshadow.cli.textout import display_width
attempt("width", lambda: (display_width("abc"), display_width("\u5907\u4efd\u4efb\u52a1"),
                          display_width("\u00e9t\u00e9")))
"""


def run_probe(python: RouterPython, lib: str) -> dict:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}, **python.env()}
    result = subprocess.run([str(python.shim), "-B", "-c", CODECS_PROBE, lib], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in result.stdout.splitlines()}


@pytest.mark.parametrize("release", RELEASES)
def test_without_python3_codecs_the_bootstrap_stands_in_for_ascii_host_names_only(
        release, trees, tmp_path):
    lib = str(trees(release) / "usr" / "lib" / "qlshadow")
    python = RouterPython(release, tmp_path)
    needs = ("needs the OpenWrt package python3-codecs "
             "(opkg install python3-codecs / apk add python3-codecs)")

    out = run_probe(python, lib)

    assert "unicodedata" in python.refused()
    assert out["stand-ins"] == "True"
    assert out["localhost"] == "ok True"
    assert out["ascii"] == "ok b'Example.org.'"
    # Python wraps a codec's UnicodeError in one naming the codec, the message kept.
    assert out["empty-label"].startswith("UnicodeError ")
    assert "host name 'a..b' has an empty label" in out["empty-label"]
    assert out["non-ascii"].startswith("UnicodeError ")
    assert f"the non-ASCII host name 'b\u00fccher.example' {needs}" in out["non-ascii"]
    assert out["resolve-non-ascii"] == out["non-ascii"]
    assert out["punycode"].startswith("UnicodeError ")
    assert f"decoding the punycode host name 'xn--bcher-kva.example' {needs}" in out["punycode"]
    assert out["secure_filename"] == f"RuntimeError this needs unicodedata, which {needs}"
    assert out["width"] == "ok (3, 8, 3)"  # CJK counted wide without unicodedata


@pytest.mark.parametrize("release", RELEASES)
def test_with_python3_codecs_installed_the_bootstrap_leaves_the_real_unicodedata(
        release, trees, tmp_path):
    lib = str(trees(release) / "usr" / "lib" / "qlshadow")
    python = RouterPython(release, tmp_path, allowed_packages(release) | {"python3-codecs"})

    out = run_probe(python, lib)

    assert out["stand-ins"] == "False"
    assert out["non-ascii"] == "ok b'xn--bcher-kva.example'"
    assert out["punycode"] == "ok b\u00fccher.example"
    assert out["secure_filename"] == "ok a_b.txt"
    assert out["width"] == "ok (3, 8, 3)"


DECIMAL_PROBE = """
import json, sys
lib = sys.argv[1]
sys.path[:0] = [lib, lib + "/vendor"]
import qlshadow_boot
import decimal
import peewee
from flask.json.provider import DefaultJSONProvider
import flask
app = flask.Flask("probe")
print(json.dumps({
    "stand_in": not hasattr(decimal, "localcontext"),
    "value": float(decimal.Decimal("12.5") + 1),
    "field": peewee.DecimalField(decimal_places=2).db_value(3.14159) is not None,
    "json": DefaultJSONProvider(app).dumps({"n": decimal.Decimal("2.5")}),
}))
"""


def run_decimal_probe(python: RouterPython, lib: str) -> dict:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}, **python.env()}
    result = subprocess.run([str(python.shim), "-B", "-c", DECIMAL_PROBE, lib], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("release", RELEASES)
def test_without_python3_decimal_the_bootstrap_stands_in_for_what_peewee_and_flask_touch(
        release, trees, tmp_path):
    lib = str(trees(release) / "usr" / "lib" / "qlshadow")
    python = RouterPython(release, tmp_path)

    out = run_decimal_probe(python, lib)

    assert "decimal" in python.refused()
    # A float: JSON writes it as a number (the real Decimal goes out as a string).
    assert out == {"stand_in": True, "value": 13.5, "field": True, "json": '{"n": 2.5}'}


@pytest.mark.parametrize("release", RELEASES)
def test_with_python3_decimal_installed_the_bootstrap_leaves_the_real_decimal(
        release, trees, tmp_path):
    lib = str(trees(release) / "usr" / "lib" / "qlshadow")
    python = RouterPython(release, tmp_path, allowed_packages(release) | {"python3-decimal"})

    out = run_decimal_probe(python, lib)

    assert out == {"stand_in": False, "value": 13.5, "field": True, "json": '{"n": "2.5"}'}


def test_the_staged_tree_holds_the_wrapper_the_app_the_shell_and_pure_python_libraries(trees):
    root = trees(RELEASES[0])
    lib = root / "usr" / "lib" / "qlshadow"

    assert os.access(root / "usr" / "bin" / "qlshadow", os.X_OK)
    assert (lib / "qlshadow" / "cli" / "__init__.py").is_file()
    assert (lib / "shell" / "task.sh").is_file()
    for name in ("flask", "werkzeug", "jinja2", "markupsafe", "itsdangerous", "click", "blinker",
                 "waitress", "cronsim"):
        assert (lib / "vendor" / name / "__init__.py").is_file(), name
    assert (lib / "vendor" / "peewee.py").is_file()
    assert not list(lib.rglob("*.so"))
    assert os.path.commonpath([str(root), ROOT]) != ROOT  # staged outside the checkout


# --- the closure bench --------------------------------------------------------------------------

def test_the_closure_bench_counts_our_package_each_declared_package_and_what_they_pull(tmp_path):
    tree = tmp_path / "tree"
    (tree / "usr" / "bin").mkdir(parents=True)
    (tree / "usr" / "bin" / "qlshadow").write_bytes(os.urandom(10_000))  # does not compress
    result = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench_closure.py"),
                             "--release", "24.10", "--package", str(tree), "--json"],
                            capture_output=True, text=True, timeout=300)

    assert result.returncode == 0, result.stderr
    [report] = json.loads(result.stdout)
    rows = {row["package"].split()[0]: row for row in report["rows"]}
    assert set(rows) == set(feeds.closure("24.10", feeds.depends("24.10"))) - set(
        report["not_counted"]) | {"qlshadow"}
    assert rows["qlshadow"]["unpacked"] == 10_000 and rows["qlshadow"]["compressed"] > 10_000
    assert rows["libpython3"]["why"] == "pulled by python3-base"
    assert all(rows[name]["why"] == "declared" and rows[name]["compressed"] > 0
               for name in feeds.depends("24.10"))
    assert report["total"] == sum(row["compressed"] for row in report["rows"])
    assert report["budget"] == 6_000_000
    assert "zlib" in report["not_counted"] and "libsqlite3" in report["not_counted"]
