"""setup.cfg describes the package; this only adds the translation catalogs' build step.

The catalogs' source (app/locale/<lang>/LC_MESSAGES/qlshadow.po) is compiled into the
.mo the standard library's gettext reads, in the built tree, by app/msgfmt.py (plain
Python: no Babel, no GNU gettext on the build host); the wheel carries the .mo only. A
source tree or an editable install has no .mo and compiles the .po in memory on first use.
"""
import glob
import importlib.util
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _msgfmt():
    spec = importlib.util.spec_from_file_location("qlshadow_build_msgfmt",
                                                  os.path.join(HERE, "app", "msgfmt.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithCatalogs(build_py):
    def run(self):
        super().run()
        msgfmt = _msgfmt()
        pattern = os.path.join(self.build_lib, "qlshadow", "locale", "*", "LC_MESSAGES", "*.po")
        for po in glob.glob(pattern):
            msgfmt.compile_file(po, po[:-3] + ".mo")
            os.remove(po)


setup(cmdclass={"build_py": BuildWithCatalogs})
