"""Peewee's undocumented names live in storage/peewee_compat.py only, pinned to the tested
minor range, and a Peewee that lacks one stops the start with one line naming it."""
from __future__ import annotations

import configparser
import os
import subprocess
import sys
import types

import peewee

from helpers import ROOT, clean_env
from qlshadow.storage import peewee_compat
from qlshadow.storage.models import ShadowRun


def test_the_installed_peewee_has_every_name_qlshadow_uses():
    assert peewee_compat.missing(peewee, ShadowRun) == []
    assert peewee_compat.check(ShadowRun) is None


def test_a_peewee_without_the_error_wrapper_is_told_by_that_name():
    stripped = types.ModuleType("peewee")
    stripped.__dict__.update({k: v for k, v in vars(peewee).items()
                              if k not in ("__exception_wrapper__", "__name__")})
    assert peewee_compat.missing(stripped) == ["peewee.__exception_wrapper__"]


def test_a_model_without_a_schema_manager_is_told_by_that_name():
    class Bare:
        _meta = types.SimpleNamespace(without_rowid=False)
    assert peewee_compat.missing(peewee, Bare) == ["Model._schema.create_table/create_indexes"]


_WITHOUT_WRAPPER = ("import sys, peewee; del peewee.__exception_wrapper__; "
                    "from qlshadow.cli import main; sys.exit(main(sys.argv[1:]))")


def test_a_start_on_a_peewee_missing_a_name_says_so_in_one_line_and_makes_nothing(tmp_path):
    data = tmp_path / "data"
    env = clean_env({"QL_DATA_DIR": str(data), "QL_SCHEDULER": "node", "QL_CRONTAB_INSTALL": ""})
    result = subprocess.run([sys.executable, "-c", _WITHOUT_WRAPPER, "db", "init"], env=env,
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"qlshadow: Peewee {peewee.__version__} has no peewee.__exception_wrapper__, which "
        f"qlshadow uses; install {peewee_compat.TESTED}"]
    assert not data.exists()


def test_setup_cfg_pins_peewee_to_the_tested_range_and_the_bundle_is_inside_it():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    requires = cfg["options"]["install_requires"].split()
    assert peewee_compat.TESTED in requires
    with open(os.path.join(ROOT, "conf", "openwrt", "bundled.txt"), encoding="utf-8") as fh:
        bundled = [line.split()[0] for line in fh if line.startswith("peewee==")]
    low, high = peewee_compat.TESTED.removeprefix("peewee>=").split(",<")
    version = tuple(int(part) for part in bundled[0].removeprefix("peewee==").split("."))
    assert tuple(int(p) for p in low.split(".")) <= version[:2] < tuple(int(p) for p in high.split("."))


def test_werkzeug_and_itsdangerous_which_the_app_imports_are_declared():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    names = {line.split(">")[0].split("=")[0].split("<")[0]
             for line in cfg["options"]["install_requires"].split()}
    assert {"werkzeug", "itsdangerous"} <= names


def test_no_module_but_the_compat_module_names_a_private_peewee_name():
    private = ("._state", "_add_conn_hooks", "__exception_wrapper__", "._schema", "_meta.without_rowid")
    offenders = []
    for base, _, files in os.walk(os.path.join(ROOT, "app")):
        for name in files:
            path = os.path.join(base, name)
            if not name.endswith(".py") or path.endswith("peewee_compat.py"):
                continue
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            offenders += [f"{path}: {word}" for word in private if word in text]
    assert offenders == []
