"""The package's shape: its import name, which layer may speak HTTP, one-way imports,
declared auth, and one integer parser for every way an id comes in."""
from __future__ import annotations

import ast
import json
import glob
import os
import subprocess
import sys
import zipfile

import pytest

from helpers import ROOT

APP_DIR = os.path.join(ROOT, "app")


def _modules() -> dict:
    """qlshadow module name -> parsed source, for every file under app/."""
    found = {}
    for path in glob.glob(os.path.join(APP_DIR, "**", "*.py"), recursive=True):
        rel = os.path.relpath(path, APP_DIR)[:-3].replace(os.sep, ".")
        name = "qlshadow" if rel == "__init__" else "qlshadow." + rel.removesuffix(".__init__")
        with open(path, encoding="utf-8") as fh:
            found[name] = (path, ast.parse(fh.read()))
    return found


def _imports(name: str, path: str, tree: ast.AST) -> set:
    """Absolute names of every module `name` imports, lazily or not."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def test_the_wheel_installs_the_import_package_qlshadow_and_no_top_level_app(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                    str(tmp_path), ROOT], check=True, capture_output=True, timeout=300)
    (wheel,) = glob.glob(str(tmp_path / "qlshadow-*.whl"))
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert "qlshadow" in tops
    assert "app" not in tops
    assert "qlshadow/cli/__init__.py" in zipfile.ZipFile(wheel).namelist()


def test_python_dash_m_qlshadow_cli_answers_help_from_any_directory(tmp_path):
    result = subprocess.run([sys.executable, "-m", "qlshadow.cli", "--help"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "serve" in result.stdout


def test_no_module_outside_views_imports_flask_or_werkzeug():
    offenders = []
    for name, (path, tree) in _modules().items():
        if name.startswith("qlshadow.web.views"):
            continue
        web = {m for m in _imports(name, path, tree) if m.split(".")[0] in ("flask", "werkzeug")}
        if web:
            offenders.append((name, sorted(web)))
    assert offenders == []


@pytest.mark.parametrize("status", ["200", "400", "401", "403", "404", "409", "413", "500", "503"])
def test_no_module_outside_views_mentions_an_http_status(status):
    offenders = []
    for name, (path, _) in _modules().items():
        if name.startswith("qlshadow.web.views"):
            continue
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                # Limits such as DETAIL_MAX = 500 are sizes, not statuses.
                if "_MAX" in line:
                    continue
                if status in line.replace(".", " ").replace(",", " ").replace("(", " ").split():
                    offenders.append(f"{path}:{number}")
    assert offenders == []


def test_imports_between_modules_go_one_way():
    modules = _modules()
    graph = {name: {m for m in _imports(name, path, tree) if m in modules and m != name}
             for name, (path, tree) in modules.items()}
    # A package importing its own submodules is how a package is made, not a cycle back.
    for name in graph:
        graph[name] = {m for m in graph[name] if not (m == "qlshadow" and name != "qlshadow")}

    cycles = []

    def visit(node, trail):
        for nxt in graph[node]:
            if nxt in trail:
                cycles.append(trail[trail.index(nxt):] + [nxt])
            elif nxt not in done:
                visit(nxt, trail + [nxt])
        done.add(node)

    done: set = set()
    for start in sorted(graph):
        if start not in done:
            visit(start, [start])
    assert cycles == []


# The layers, lowest first: the base is every module directly under app/ and the packages of
# BASE_PACKAGES; each other sub-package is one layer, and a module imports only its own layer
# and those before it, lazily or not.
LAYERS = ("base", "storage", "core", "host", "service", "watch", "web", "cli")
# Base modules grown into packages (app/config/): every layer still reads them.
BASE_PACKAGES = ("config",)
# (importer, imported) pairs allowed to import upward, each with its reason. None now.
UPWARD_ALLOWED: dict = {}


def _layer(name: str) -> str:
    part = name.split(".")[1] if "." in name else "base"
    return part if part in LAYERS else "base"


def upward_imports(modules: dict) -> list:
    """'importer -> imported' for each import of a module in a later layer."""
    found = []
    for name, (path, tree) in modules.items():
        for target in _imports(name, path, tree):
            if (target in modules and LAYERS.index(_layer(target)) > LAYERS.index(_layer(name))
                    and (name, target) not in UPWARD_ALLOWED):
                found.append(f"{name} -> {target}")
    return sorted(found)


def test_each_sub_package_of_app_is_a_layer():
    packages = {name.split(".")[1] for name in _modules() if name.count(".") >= 2}
    assert packages <= set(LAYERS) | set(BASE_PACKAGES)


def test_the_layer_check_sees_an_upward_import_even_inside_a_function():
    core = ("app/core/x.py", ast.parse("def f():\n    from qlshadow.watch import metrics\n"))
    watch = ("app/watch/metrics.py", ast.parse("from qlshadow.core import x\n"))
    modules = {"qlshadow.core.x": core, "qlshadow.watch.metrics": watch}
    assert upward_imports(modules) == ["qlshadow.core.x -> qlshadow.watch.metrics"]


def test_a_module_of_the_config_package_is_base_and_sees_no_layer_above_it():
    config = ("app/config/x.py", ast.parse("from qlshadow.storage import db\n"))
    storage = ("app/storage/db.py", ast.parse("from qlshadow.config import x\n"))
    modules = {"qlshadow.config.x": config, "qlshadow.storage.db": storage}
    assert upward_imports(modules) == ["qlshadow.config.x -> qlshadow.storage.db"]


def test_each_layer_imports_only_the_layers_below_it():
    assert upward_imports(_modules()) == []


def test_every_open_route_but_the_token_exchange_declares_its_scope(app):
    undeclared = []
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/open/") or rule.rule == "/open/auth/token":
            continue
        view = app.view_functions[rule.endpoint]
        if not getattr(view, "required_scopes", None):
            undeclared.append(rule.rule)
    assert undeclared == []


def test_the_status_callback_accepts_a_crons_or_a_status_token(client):
    import time

    from qlshadow.storage import db
    from qlshadow.core.auth import create_app_record, issue_token
    from qlshadow.storage.models import App

    def token_with(scope: str) -> dict:
        with db.database.connection_context(), db.write_transaction():
            create_app_record(f"only-{scope}", [scope])
            value, _ = issue_token(App.get(App.name == f"only-{scope}").id, int(time.time()))
        return {"Authorization": f"Bearer {value}"}

    body = {"ids": [1], "status": 1}
    answers = {scope: client.put("/open/crons/status", json=body, headers=token_with(scope))
               .status_code for scope in ("crons", "status", "runs", "metrics")}
    assert answers == {"crons": 200, "status": 200, "runs": 403, "metrics": 403}


# One integer parser: the same id text is valid (or not) on every path it comes in by.
LONGEST_ID = str(2**63 - 1)      # 19 digits, the largest int64
TOO_LONG_ID = str(2**63)         # 19 digits, one past int64


def test_a_nineteen_digit_id_is_accepted_by_the_callback_and_by_delete(client, auth):
    callback = client.put("/open/crons/status", json={"ids": [LONGEST_ID], "status": 1},
                          headers=auth)
    delete = client.delete("/open/crons", json=[LONGEST_ID], headers=auth)
    disable = client.put("/open/crons/disable", json=[LONGEST_ID], headers=auth)
    assert (callback.status_code, delete.status_code, disable.status_code) == (200, 200, 200)


def test_an_id_past_int64_is_refused_by_the_callback_and_by_delete(client, auth):
    callback = client.put("/open/crons/status", json={"ids": [TOO_LONG_ID], "status": 1},
                          headers=auth)
    delete = client.delete("/open/crons", json=[TOO_LONG_ID], headers=auth)
    update = client.put("/open/crons", json={"id": TOO_LONG_ID, "name": "x"}, headers=auth)
    listing = client.get(f"/open/runs?cron_id={TOO_LONG_ID}", headers=auth)
    assert [r.status_code for r in (callback, delete, update, listing)] == [400, 400, 400, 400]


def test_the_integer_parser_takes_ints_and_ascii_digits_only():
    from qlshadow.errors import InvalidInput
    from qlshadow.parse import parse_int, to_int
    assert to_int("42", 0, 100) == 42 and to_int(42, 0, 100) == 42
    assert [to_int(v, 0, 100) for v in ("", "4 2", "-1", "٤٢", 4.0, True, None, "101")] == [None] * 8
    with pytest.raises(InvalidInput, match="'limit' must be an integer between 1 and 500"):
        parse_int("0", "limit", 1, 500)


_IDLE_SERVER = r"""
import json, sys, uuid
from qlshadow import config
from qlshadow.core.auth import system_token
from qlshadow.web.views import create_app
from qlshadow.storage import db
app = create_app(config.load())
with db.database.connection_context(), db.write_transaction():
    token = system_token(app.extensions["qlshadow"].token_file)["value"]
client = app.test_client()
auth = {"Authorization": "Bearer " + token}
cron = client.post("/open/crons", headers=auth, json={"name": "a", "command": "true",
                   "schedule": "* * * * *"}).get_json()["data"]["id"]
for status in (0, 1):
    assert client.put("/open/crons/status", headers=auth, json={
        "ids": [cron], "status": status, "pid": 1, "log_path": "a/1.log",
        "execution_id": "legacy-system:1764460800:" + str(uuid.UUID(int=1, version=4))}).status_code == 200
assert client.get("/health").status_code == 200
print(json.dumps(sorted(name for name in sys.modules if name.startswith("qlshadow."))))
print(json.dumps(sorted(getattr(sys.modules.get("qlshadow.i18n"), "_catalogs", {}))))
"""


@pytest.mark.parametrize("shadow,lang", [("", "en"), ("scheduled_system", "en"),
                                          ("scheduled_system", "zh_CN")])
def test_a_server_answering_callbacks_and_health_loads_nothing_for_pages_and_reads(tmp_path, shadow,
                                                                                  lang):
    # Every module is memory on an idle router: what only a page, the gate, a read of Runs or
    # an alert tick needs is imported by the view or command that needs it.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL_", "QL3_"))}
    env.update({"QL_DATA_DIR": str(tmp_path / "data"), "QL_SCHEDULER": "node",
                "QL_CRONTAB_INSTALL": "", "QL3_SHADOW_ORIGINS": shadow, "QL_LANG": lang})
    result = subprocess.run([sys.executable, "-c", _IDLE_SERVER], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=True)
    loaded = set(json.loads(result.stdout.splitlines()[-2]))
    # No translation catalog: callbacks and /health say nothing in a language.
    assert json.loads(result.stdout.splitlines()[-1]) == []

    unneeded = {"qlshadow.web.overview", "qlshadow.watch.health", "qlshadow.core.shadow.reader",
                "qlshadow.watch.reconcile", "qlshadow.watch.alerts", "qlshadow.watch.notify",
                "qlshadow.host.logs", "qlshadow.watch.metrics",
                "qlshadow.cli", "qlshadow.cli.textout", "qlshadow.cli.gate_report", "qlshadow.msgfmt",
                # a snapshot is restored only when one is there (the first start after a
                # firmware upgrade); the CLI's own commands
                "qlshadow.storage.backup", "qlshadow.service.qlimport", "qlshadow.service.adopt",
                # `qlshadow prune`; step 1 of the schema, run only on a database from before it
                "qlshadow.storage.retention.prune_command", "qlshadow.storage.schema.rekey_runs"}
    if lang == "en":  # an English server never loads the translation module at all
        unneeded.add("qlshadow.i18n")
    assert loaded & unneeded == set()
    assert ("qlshadow.core.shadow.writer" in loaded) == bool(shadow)


# --- scripts/: benches patch nothing and keep their programs in modules ------------------

SCRIPTS_DIR = os.path.join(ROOT, "scripts")


def _script_trees() -> dict:
    """Relative path -> parsed source of every Python file under scripts/."""
    found = {}
    for path in sorted(glob.glob(os.path.join(SCRIPTS_DIR, "**", "*.py"), recursive=True)):
        with open(path, encoding="utf-8") as fh:
            found[os.path.relpath(path, ROOT)] = ast.parse(fh.read())
    return found


def _product_names(tree: ast.AST) -> set:
    """Local names bound to qlshadow or to something imported from it."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names
                         if alias.name.split(".")[0] == "qlshadow")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "qlshadow":
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def product_patches(tree: ast.AST) -> list:
    """(line, text) of each assignment to an attribute of a product name, each setattr or
    delattr on one, and any use of pytest's monkeypatch."""
    product = _product_names(tree)
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, ast.Delete) else [node.target]
        while any(isinstance(target, (ast.Tuple, ast.List)) for target in targets):
            targets = [part for target in targets for part in
                       (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target])]
        for target in targets:
            if isinstance(target, (ast.Attribute, ast.Subscript)) and _root(target) in product:
                found.append((node.lineno, ast.unparse(target)))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("setattr", "delattr") and node.args
                and _root(node.args[0]) in product):
            found.append((node.lineno, ast.unparse(node)))
        if isinstance(node, ast.Name) and node.id == "monkeypatch":
            found.append((node.lineno, "monkeypatch"))
    return found


def python_c_programs(tree: ast.AST) -> list:
    """(line, program) of each `python -c PROGRAM` in an argv list whose program is more
    than a one-line probe of at most two statements (a module-level constant is resolved)."""
    constants = {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 for target in node.targets if isinstance(target, ast.Name)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.List, ast.Tuple)):
            continue
        items = node.elts
        for before, flag, program in zip(items, items[1:], items[2:], strict=False):
            if not (isinstance(flag, ast.Constant) and flag.value == "-c"):
                continue
            if isinstance(before, ast.Constant) and before.value in ("wrk", "crontab"):
                continue
            if isinstance(program, ast.Name):
                text = constants.get(program.id, "?")
            elif isinstance(program, ast.Constant):
                text = str(program.value)
            else:
                text = ast.unparse(program)
            try:
                statements = len(ast.parse(text).body)
            except SyntaxError:
                statements = 99
            if "\n" in text.strip() or statements > 2:
                found.append((node.lineno, text[:60]))
    return found


def test_the_checks_on_scripts_see_a_patch_and_a_program_in_a_string():
    tree = ast.parse("from qlshadow import db\nimport qlshadow.watch.metrics as m\n"
                     "db.SQLITE_PRAGMAS = ()\nm.Counters.count_callback = None\n"
                     "setattr(db, 'x', 1)\nlocal.value = 1\n"
                     "PROGRAM = 'import sys\\nprint(sys.argv)\\n'\n"
                     "argv = [python, '-c', PROGRAM]\nprobe = [python, '-c', 'import sys; print(1)']\n")
    assert [line for line, _ in product_patches(tree)] == [3, 4, 5]
    assert [line for line, _ in python_c_programs(tree)] == [8]


def test_no_script_patches_a_product_name():
    """Benches vary the product through its parameters (Settings fields, serving.serve's
    options), never by assigning over its names."""
    offenders = {path: patches for path, tree in _script_trees().items()
                 if (patches := product_patches(tree))}
    assert offenders == {}


def test_no_bench_runs_a_python_program_from_a_string():
    """A program a bench runs in a child process is a module under scripts/ (ruff reads it),
    run as a file or with -m; `-c` is left to one-line probes. scripts/pkgbuild/ (the
    package build) is not a bench."""
    offenders = {path: programs for path, tree in _script_trees().items()
                 if not path.startswith(os.path.join("scripts", "pkgbuild"))
                 and (programs := python_c_programs(tree))}
    assert offenders == {}


def test_every_package_under_app_is_listed_for_the_wheel():
    # setup.cfg names the packages one by one: a folder missing there installs from a source
    # tree (editable) but is left out of the wheel, which only a packaged install would show.
    import configparser
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    listed = set(cfg["options"]["packages"].split())
    found = set()
    for path in glob.glob(os.path.join(APP_DIR, "**", "__init__.py"), recursive=True):
        rel = os.path.relpath(os.path.dirname(path), APP_DIR)
        found.add("qlshadow" if rel == "." else "qlshadow." + rel.replace(os.sep, "."))
    assert listed == found
