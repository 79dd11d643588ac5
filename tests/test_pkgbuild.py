"""scripts/pkgbuild: one staging (conf/openwrt/files.txt, bundled.txt) for both package
formats, the build fronts scripts/build-ipk.sh and build-apk.sh, and what they promise:
pinned library versions, the package release in the version, reproducible bytes, OpenWrt's
maintainer-script wrapping, and an apk that reads back."""
from __future__ import annotations

import ast
import configparser
import glob
import hashlib
import io
import os
import subprocess
import sys
import tarfile
from importlib import metadata

import pytest

from qlshadow import __version__
from helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))
from pkgbuild import stage  # noqa: E402  (scripts/ is not a package)
from pkgbuild.__main__ import apk_scripts  # noqa: E402



def run_build(script: str, *args, **env) -> subprocess.CompletedProcess:
    """scripts/<script> with this test's Python, the last commit's date and env's changes."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("SOURCE_DATE_EPOCH", "QL_PACKAGE_RELEASE")}
    environ.update(PYTHON=sys.executable, **env)
    return subprocess.run(["sh", os.path.join(ROOT, "scripts", script), *map(str, args)],
                          env=environ, capture_output=True, text=True, timeout=180)


def members(data: bytes) -> dict:
    """name -> bytes (None for a directory) of a .tar.gz held in memory."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else None) for m in tar}


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> stage.Staged:
    tree = tmp_path_factory.mktemp("staged") / "root"
    tree.mkdir()
    return stage.stage(str(tree), "24.10")


# --- staging -------------------------------------------------------------------------------

def test_every_manifest_line_is_staged_with_its_mode(staged):
    for entry in stage.read_manifest():
        if entry.target.endswith("/"):
            staged_files = [os.path.join(base, n) for base, _, names in
                            os.walk(staged.tree + entry.target) for n in names]
        else:
            staged_files = [staged.tree + entry.target]
        assert staged_files, entry
        for path in staged_files:
            assert os.stat(path).st_mode & 0o7777 == entry.mode, path


def test_the_conffiles_are_the_manifest_lines_marked_so(staged):
    assert staged.conffiles == sorted(e.target for e in stage.read_manifest() if e.conffile)
    assert staged.conffiles == ["/etc/config/qlshadow", "/etc/qlshadow/qlshadow.conf"]


def test_a_line_added_to_the_manifest_is_staged(tmp_path):
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "a.txt").write_text("a")
    (tmp_path / "extra" / "b.txt").write_text("b")
    manifest = tmp_path / "files.txt"
    manifest.write_text(f"scripts/smoke.sh /usr/lib/qlshadow/smoke.sh 0755\n"
                        f"{tmp_path}/extra/*.txt /usr/share/qlshadow/ 0640  # a glob\n"
                        f"{tmp_path}/extra /etc/qlshadow-extra/ 0600 conffile\n")
    tree = tmp_path / "root"
    tree.mkdir()

    staged = stage.stage(tree, "24.10", manifest=str(manifest))  # a Path will do

    assert (tree / "usr/share/qlshadow/b.txt").read_text() == "b"
    assert os.stat(tree / "usr/share/qlshadow/a.txt").st_mode & 0o7777 == 0o640
    assert staged.conffiles == ["/etc/qlshadow-extra/a.txt", "/etc/qlshadow-extra/b.txt"]
    assert (tree / "usr/lib/qlshadow/vendor/flask/__init__.py").is_file()


@pytest.mark.parametrize("line", ["app/ usr/lib/qlshadow/ 0644", "app/ /usr/lib/x 644",
                                  "app/ /usr/lib/x 0644 keep", "app/"])
def test_a_malformed_manifest_line_is_refused_with_its_line_number(tmp_path, line):
    manifest = tmp_path / "files.txt"
    manifest.write_text(f"# comment\n{line}\n")

    with pytest.raises(stage.BuildError, match=r"files\.txt:2: expected"):
        stage.read_manifest(str(manifest))


def test_a_manifest_line_naming_nothing_is_refused(tmp_path):
    manifest = tmp_path / "files.txt"
    manifest.write_text("conf/no-such-file /etc/x 0644\n")
    (tmp_path / "root").mkdir()

    with pytest.raises(stage.BuildError, match="conf/no-such-file names no file"):
        stage.stage(str(tmp_path / "root"), "24.10", manifest=str(manifest))


def test_the_staged_tree_holds_sources_and_no_byte_code_or_native_code(staged):
    lib = staged.tree + stage.LIB
    names = [n for _, dirs, files in os.walk(lib) for n in dirs + files]

    assert not [n for n in names if n.endswith((".pyc", ".so", ".c", ".pyi"))]
    assert "_native.py" in names and "__pycache__" not in names


def test_the_byte_code_variant_is_sourceless_and_for_the_releases_python(tmp_path):
    # Only scripts/bench_package_start.py builds it, to compare with the shipped sources.
    tree = tmp_path / "root"
    tree.mkdir()
    stage.stage(str(tree), "24.10", code="bytecode")
    magic = subprocess.run([stage.find_python("24.10"), "-c", "import importlib.util, sys; "
                            "sys.stdout.write(importlib.util.MAGIC_NUMBER.hex())"],
                           capture_output=True, text=True, check=True).stdout
    lib = tree / "usr" / "lib" / "qlshadow"

    assert not list(lib.rglob("*.py"))
    assert {p.read_bytes()[:4].hex() for p in lib.rglob("*.pyc")} == {magic}
    # Docstrings stripped, asserts kept: a module's byte code holds no docstring of its own.
    flask = subprocess.run([stage.find_python("24.10"), "-I", "-c",
                            "import sys; sys.path.insert(0, sys.argv[1]); import flask.app as a; "
                            "print(a.__doc__, a.Flask.__doc__, a.Flask.run.__doc__)",
                            str(lib / "vendor")], capture_output=True, text=True)
    assert flask.stdout.split() == ["None", "None", "None"], flask.stderr


def without_docstrings(source: bytes) -> str:
    """The module's AST, docstrings and function annotations removed, with every node's
    line numbers."""
    tree = ast.parse(source)
    for doc in stage.docstrings(tree):
        doc.value.value = ""
        doc.value.col_offset = doc.value.end_col_offset = doc.col_offset = doc.end_col_offset = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            node.annotation = None
            node.end_lineno = node.lineno
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
    return ast.dump(tree, include_attributes=True)


SAMPLE = """\
\"\"\"Module doc,
over two lines.\"\"\"  # after it
import os  # why os


class A:  # a class
    \"\"\"Class doc.\"\"\"

    # a comment line
    def f(self, x="# not a comment"):
        \'\'\'Function doc \u00e9\u00e9,

        three lines.\'\'\'
        s = \'\'\'kept
        # kept too\'\'\'
        return x + s + os.sep  # trailing


def only_doc():
    "Just a docstring."
""".encode()


def test_blanking_keeps_every_statement_on_its_line_without_docstrings_and_comments():
    blanked = stage.blank_docs(SAMPLE)

    assert blanked.count(b"\n") == SAMPLE.count(b"\n")
    assert strip_columns(without_docstrings(blanked)) == strip_columns(without_docstrings(SAMPLE))
    assert b"doc" not in blanked.replace(b"only_doc", b"") and b"# a" not in blanked
    assert b"# not a comment" in blanked and b"# kept too" in blanked
    namespace: dict = {}
    exec(compile(blanked, "sample", "exec"), namespace)
    assert namespace["A"]().f("x") == "xkept\n        # kept too/"
    assert namespace["only_doc"]() is None


def test_a_stored_compacted_source_is_the_one_compacting_gives_and_is_read_back(tmp_path, monkeypatch):
    # The suite's builds share QL_PKGBUILD_CACHE (conftest); a stored result must be exactly
    # what compacting gives, found again by the source, and another source is another entry.
    monkeypatch.setenv("QL_PKGBUILD_CACHE", str(tmp_path / "store"))
    source = SAMPLE + f"# {tmp_path}\n".encode()  # not already kept by this process
    expected = stage.compact_layout(stage.blank_docs(source), annotations=False)

    assert stage._shipped_source(source) == expected
    stored = [p for p in (tmp_path / "store").rglob("*") if p.is_file()]
    assert [p.read_bytes() for p in stored] == [expected]
    stored[0].write_bytes(b"x = 1\n")  # what a read of the store gives, the process's cache aside
    stage._shipped_source.cache_clear()
    assert stage._shipped_source(source) == b"x = 1\n"
    stage._shipped_source.cache_clear()
    stage._shipped_source(source + b"\n")
    assert len([p for p in (tmp_path / "store").rglob("*") if p.is_file()]) == 2


def test_blanking_the_shipped_sources_changes_no_code_and_no_line_number(staged):
    # The staged tree is blanked; the libraries' own files are the originals.
    from importlib import metadata
    checked = 0
    for bundle in stage.read_bundled():
        dist = metadata.distribution(bundle.name)
        for file in dist.files or ():
            staged_file = os.path.join(staged.tree + stage.LIB, "vendor", str(file))
            if str(file).endswith(".py") and os.path.isfile(staged_file):
                with open(dist.locate_file(file), "rb") as fh, open(staged_file, "rb") as st:
                    original, blanked = fh.read(), st.read()
                assert strip_columns(without_docstrings(blanked)) == \
                    strip_columns(without_docstrings(original)), file
                checked += 1
    assert checked > 100


COMPACT_SAMPLE = b'''\
# -*- coding: utf-8 -*-
import os, \\
    sys


@staticmethod
def f(a, *args, b: int = -1, **kw) -> "dict[str, int]":
    if a ** -b and a[1:-1] != 1 .real and 0x1f if a else b:
        return {"x": [a, (b,
                          c)],   # inside brackets
                **kw}
    s = "" "x" 'y'
    t = f"{a!r:>{b}} {{literal}} {'q'}"
    u = """\\
kept   as   written"""
    return s if a in"ab" else lambda x, y=2: x@y
    x = a is not b; y = not-a
'''


def test_compacting_keeps_every_token_on_its_line():
    compact = stage.compact_layout(COMPACT_SAMPLE)

    assert len(compact) < len(COMPACT_SAMPLE) * 0.8
    assert compact.count(b"\n") == COMPACT_SAMPLE.count(b"\n")
    assert compact.startswith(b"# -*- coding: utf-8 -*-\n")
    assert b'\ndef f(a,*args,b:int=-1,**kw)->"dict[str, int]":\n' in compact
    assert b"\n if a**-b and a[1:-1]!=1 .real and 0x1f if a else b:\n" in compact
    assert b"\n  return{" in compact and b"\n**kw}\n" in compact
    assert b'"" "x" \'y\'' in compact and b"kept   as   written" in compact
    assert b"inside brackets" not in compact and b"import os,\\\nsys\n" in compact
    assert strip_columns(ast.dump(ast.parse(compact), include_attributes=True)) == \
        strip_columns(ast.dump(ast.parse(COMPACT_SAMPLE), include_attributes=True))


ANNOTATED = b'''\
from dataclasses import dataclass


@dataclass
class Row:
    name: str = "x"    # a field: kept


def f(a: int, b: "dict[str,  int]" = {"k": 1}, *rest: (str), c=lambda x: x,
      **kw: dict[
          str, int]) -> (
        list[int]):
    total: int = a
    return [total, b, c(1)]


async def g(x, /, y: int | None = None) -> None: pass
'''


def test_leaving_out_function_annotations_keeps_defaults_lines_and_variable_annotations():
    compact = stage.compact_layout(ANNOTATED, annotations=False)

    assert b"name:str=\"x\"" in compact and b"total:int=a" in compact
    # The return annotation's brackets held a line break: a backslash holds it now.
    assert b"\ndef f(a,b={\"k\":1},*rest,c=lambda x:x,\n**kw\n)\\\n:\n" in compact
    assert b"\nasync def g(x,/,y=None):pass\n" in compact
    namespace: dict = {}
    exec(compile(compact, "annotated", "exec"), namespace)
    assert namespace["f"](1) == [1, {"k": 1}, 1] and namespace["f"].__annotations__ == {}
    assert namespace["Row"]().name == "x"
    assert strip_columns(without_docstrings(compact)) == strip_columns(without_docstrings(ANNOTATED))


def test_nothing_shipped_reads_a_functions_annotations(staged):
    # What would: __annotations__, typing.get_type_hints, inspect.get_annotations and
    # Signature's annotations, functools.singledispatch's register by annotation.
    readers = {"__annotations__", "get_type_hints", "get_annotations", "annotation",
               "return_annotation", "singledispatch", "singledispatchmethod"}
    found = []
    for folder, _dirs, names in os.walk(staged.tree + stage.LIB):
        for name in names:
            if name.endswith(".py"):
                with open(os.path.join(folder, name), "rb") as fh:
                    words = set(tokenize_names(fh.read()))
                found += [f"{name}: {w}" for w in sorted(words & readers)]
    assert found == []


def tokenize_names(source: bytes) -> list:
    import tokenize
    return [t.string for t in tokenize.tokenize(io.BytesIO(source).readline)
            if t.type == tokenize.NAME or (t.type == tokenize.STRING and t.string.isidentifier())]


def code_shape(code) -> list:
    """What Python compiled, columns aside: byte code, names, constants, line table."""
    shape = [code.co_code, code.co_names, code.co_varnames, list(code.co_lines())]
    for const in code.co_consts:
        if isinstance(const, frozenset):  # its order is the set's, not the source's
            const = sorted(const, key=repr)
        shape.append(code_shape(const) if hasattr(const, "co_code") else repr(const))
    return shape


def test_the_shipped_sources_compile_to_the_originals_code_docstrings_aside(staged):
    # The shipped module against the original, both with docstrings emptied and without
    # function annotations: the same byte code at the same line numbers (only columns, which
    # tracebacks' carets use, move).
    originals = {os.path.join(stage.LIB, "qlshadow", os.path.relpath(p, os.path.join(ROOT, "app"))): p
                 for p in glob.glob(os.path.join(ROOT, "app", "**", "*.py"), recursive=True)}
    for bundle in stage.read_bundled():
        dist = metadata.distribution(bundle.name)
        for file in dist.files or ():
            originals[os.path.join(stage.LIB, "vendor", str(file))] = str(dist.locate_file(file))
    checked = 0
    for folder, _dirs, names in os.walk(staged.tree + stage.LIB):
        for name in names:
            if not name.endswith(".py"):
                continue
            shipped_path = os.path.join(folder, name)
            device_path = shipped_path[len(staged.tree):]
            if device_path not in originals:
                continue
            with open(shipped_path, "rb") as fh, open(originals[device_path], "rb") as orig:
                shipped, original = fh.read(), orig.read()
            assert stage.compact_layout(shipped) == shipped, device_path  # nothing left to do
            tree = ast.parse(stage.blank_docs(original))
            for node in ast.walk(tree):
                if isinstance(node, ast.arg):
                    node.annotation = None
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    node.returns = None
            assert code_shape(compile(shipped, device_path, "exec", dont_inherit=True)) == \
                code_shape(compile(tree, device_path, "exec", dont_inherit=True)), device_path
            checked += 1
    assert checked > 190


def strip_columns(dump: str) -> str:
    # Columns move where a comment or docstring went; line numbers must not.
    import re
    return re.sub(r"(end_)?col_offset=\d+", "", dump)


def test_the_modules_nothing_imports_are_left_out_unless_asked_for(staged, tmp_path):
    vendor = staged.tree + stage.LIB + "/vendor"
    unused = [path for bundle in stage.read_bundled() for path in bundle.unused]
    full = tmp_path / "root"
    full.mkdir()
    stage.stage(full, "24.10", trim=False, blank=False)

    assert "click/shell_completion.py" in unused and "jinja2/sandbox.py" in unused
    assert not [p for p in unused if os.path.exists(os.path.join(vendor, p))]
    assert all((full / "usr/lib/qlshadow/vendor" / p).is_file() for p in unused)
    assert os.path.isfile(vendor + "/jinja2/debug.py")  # template errors import it


def test_the_packaged_config_keeps_data_on_flash(staged):
    with open(staged.tree + "/etc/qlshadow/qlshadow.conf", encoding="utf-8") as fh:
        assert "\nQL_DATA_DIR=/srv/qlshadow\n" in fh.read()


# --- the pinned library versions -----------------------------------------------------------

def test_the_test_install_holds_the_versions_the_package_carries():
    bundles = stage.read_bundled()

    assert {b.name: metadata.version(b.name) for b in bundles} == \
        {b.name: b.version for b in bundles}


def test_setup_cfg_pins_the_test_extra_to_the_carried_versions():
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, "setup.cfg"))
    pins = dict(line.split("==") for line in parser["options.extras_require"]["test"].splitlines()
                if "==" in line)

    assert pins == {b.name: b.version for b in stage.read_bundled()}
    # A plain install still takes any Flask 3.
    assert "flask>=3.0" in parser["options"]["install_requires"].split()


def test_a_python_with_other_library_versions_is_refused(tmp_path):
    pinned = tmp_path / "bundled.txt"
    pinned.write_text("flask==0.0.1 flask\nblinker==1.9.0 blinker\nnot-a-dist==1 x\n")
    (tmp_path / "root").mkdir()

    with pytest.raises(stage.BuildError) as caught:
        stage.stage(str(tmp_path / "root"), "24.10", bundled=str(pinned))
    message = str(caught.value)

    assert f"flask {metadata.version('flask')} (pinned 0.0.1)" in message
    assert "not-a-dist not installed (pinned 1)" in message and "blinker" not in message
    assert not os.listdir(tmp_path / "root")


# --- the build fronts ----------------------------------------------------------------------

@pytest.mark.parametrize("script", ["build-ipk.sh", "build-apk.sh"])
def test_help_prints_the_usage_and_builds_nothing(tmp_path, script):
    result = run_build(script, "--help", tmp_path / "out")

    assert result.returncode == 0, result.stderr
    assert "QL_PACKAGE_RELEASE" in result.stdout and "SOURCE_DATE_EPOCH" in result.stdout
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("shell", [["busybox", "sh"], ["dash"], ["bash"]], ids=lambda s: s[0])
@pytest.mark.parametrize("script", ["build-ipk.sh", "build-apk.sh"])
def test_the_build_fronts_parse_under_every_shell(shell, script):
    result = subprocess.run([*shell, "-n", os.path.join(ROOT, "scripts", script)],
                            capture_output=True, text=True)

    assert result.returncode == 0, result.stderr


def test_the_package_release_is_part_of_the_version(tmp_path):
    result = run_build("build-ipk.sh", tmp_path, QL_PACKAGE_RELEASE="7")

    assert result.returncode == 0, result.stderr
    path = result.stdout.strip()
    assert os.path.basename(path) == f"qlshadow_{__version__}-r7_all.ipk"
    with open(path, "rb") as fh:
        control = members(members(fh.read())["./control.tar.gz"])["./control"].decode()
    assert f"\nVersion: {__version__}-r7\n" in control


def test_a_bad_package_release_is_refused_before_building(tmp_path):
    result = run_build("build-ipk.sh", tmp_path / "out", QL_PACKAGE_RELEASE="r2")

    assert result.returncode == 1
    assert result.stderr.strip() == "build-ipk: QL_PACKAGE_RELEASE must be a whole number, not 'r2'"
    assert not (tmp_path / "out").exists()


def test_another_source_date_gives_other_bytes_and_the_same_one_the_same(tmp_path):
    first = run_build("build-ipk.sh", tmp_path / "a", SOURCE_DATE_EPOCH="1700000000")
    again = run_build("build-ipk.sh", tmp_path / "b", SOURCE_DATE_EPOCH="1700000000")
    later = run_build("build-ipk.sh", tmp_path / "c", SOURCE_DATE_EPOCH="1700000001")
    contents = []
    for result in (first, again, later):
        assert result.returncode == 0, result.stderr
        with open(result.stdout.strip(), "rb") as fh:
            contents.append(fh.read())

    assert contents[0] == contents[1]
    assert contents[0] != contents[2]


# --- maintainer scripts for apk, as OpenWrt's package-pack.mk makes them ------------------

def test_apk_scripts_run_openwrts_defaults_then_the_package_part():
    scripts = apk_scripts(b"#!/bin/sh\necho installed\n", b"#!/bin/sh\necho removing\n")

    install = scripts["post-install"].decode()
    assert install.startswith('#!/bin/sh\n[ "${IPKG_NO_SCRIPT}" = "1" ] && exit 0\n')
    assert install.endswith('export pkgname="qlshadow"\nadd_group_and_user\ndefault_postinst\n'
                            'echo installed\n')
    # An upgrade runs the same with PKG_UPGRADE=1 (default_postinst then keeps the enable
    # state); one #! line only.
    upgrade = scripts["post-upgrade"].decode()
    assert upgrade == "#!/bin/sh\nexport PKG_UPGRADE=1\n" + install.split("\n", 1)[1]
    remove = scripts["pre-deinstall"].decode()
    assert remove.endswith("default_prerm\necho removing\n") and remove.count("#!") == 1


def test_apk_scripts_parse_under_every_shell(tmp_path):
    with open(os.path.join(stage.SCRIPTS_DIR, "postinst"), "rb") as a, \
            open(os.path.join(stage.SCRIPTS_DIR, "prerm"), "rb") as b:
        scripts = apk_scripts(a.read(), b.read())
    for name, text in scripts.items():
        (tmp_path / name).write_bytes(text)
        for shell in (["busybox", "sh"], ["dash"], ["bash"]):
            result = subprocess.run([*shell, "-n", str(tmp_path / name)], capture_output=True,
                                    text=True)
            assert result.returncode == 0, (name, shell, result.stderr)


# --- the apk, read back (needs the apk writer, scripts/pkgbuild/apk.py) -------------------

@pytest.fixture(scope="module")
def apk(tmp_path_factory) -> dict:
    from pkgbuild.apk import read_apk

    out = tmp_path_factory.mktemp("apk")
    result = run_build("build-apk.sh", out, QL_PACKAGE_RELEASE="3")
    assert result.returncode == 0, result.stderr
    path = result.stdout.strip()
    return {"path": path, **read_apk(path)}


def test_the_apk_names_the_version_release_and_depends(apk):
    assert os.path.basename(apk["path"]) == f"qlshadow-{__version__}-r3.apk"
    info = apk["info"]
    assert info["name"] == "qlshadow" and info["version"] == f"{__version__}-r3"
    assert info["arch"] == "noarch"
    assert sorted(str(d) for d in info["depends"]) == sorted(stage.depends("25.12"))


def test_the_apk_carries_the_maintainer_scripts_and_apks_records(apk):
    assert sorted(apk["scripts"]) == ["post-install", "post-upgrade", "pre-deinstall"]
    assert b"\ndefault_postinst\n" in apk["scripts"]["post-install"]
    paths = {e["path"] for e in apk["entries"]}
    for record in ("list", "conffiles", "conffiles_static"):
        assert f"lib/apk/packages/qlshadow.{record}" in paths
    assert "usr/lib/qlshadow/vendor/flask/app.py" in paths


def test_the_apks_conffile_records_hold_each_conffiles_sha256(tmp_path):
    from pkgbuild.__main__ import add_apk_records

    tree = tmp_path / "root"
    (tree / "etc" / "config").mkdir(parents=True)
    (tree / "etc" / "config" / "x").write_text("option a 1\n")
    (tree / "usr" / "bin").mkdir(parents=True)
    (tree / "usr" / "bin" / "x").write_text("#!/bin/sh\n")

    add_apk_records(str(tree), ["/etc/config/x"])

    records = tree / "lib" / "apk" / "packages"
    assert (records / "qlshadow.list").read_text() == "/etc/config/x\n/usr/bin/x\n"
    assert (records / "qlshadow.conffiles").read_text() == "/etc/config/x\n"
    digest = hashlib.sha256(b"option a 1\n").hexdigest()
    assert (records / "qlshadow.conffiles_static").read_text() == f"/etc/config/x {digest}\n"


def test_the_ipk_data_is_the_same_staging_as_the_apks(apk, tmp_path):
    result = run_build("build-ipk.sh", tmp_path, QL_PACKAGE_RELEASE="3")
    assert result.returncode == 0, result.stderr
    with open(result.stdout.strip(), "rb") as fh:
        data = members(members(fh.read())["./data.tar.gz"])
    ipk_files = {n[2:] for n, body in data.items() if body is not None}
    apk_files = {e["path"] for e in apk["entries"] if e["type"] == "file"}

    assert apk_files - ipk_files == {f"lib/apk/packages/qlshadow.{r}"
                                     for r in ("list", "conffiles", "conffiles_static")}
    assert ipk_files - apk_files == set()



# --- shell comments --------------------------------------------------------------------------

SHELL_SAMPLE = """\
#!/bin/sh
# a comment
set -eu
    # an indented one
cat <<END
# a here-document line: data
END
code='
# inside a quoted string: data
'
case ${1-} in
	# a comment inside case
	a) echo "$# ${1#x}" ;;  # a trailing comment stays
esac
printf '%s\\n' x \\
	# after a continued line: a comment
echo "$code"
"""


def test_only_the_comment_lines_of_a_shell_script_are_emptied(tmp_path):
    script, original = tmp_path / "s.sh", tmp_path / "original.sh"
    script.write_text(SHELL_SAMPLE)
    original.write_text(SHELL_SAMPLE)

    assert stage.shell_comment_lines(SHELL_SAMPLE) == [2, 4, 12, 16]
    stage.strip_shell_comments(str(script))

    stripped = script.read_text().split("\n")
    assert len(stripped) == len(SHELL_SAMPLE.split("\n"))
    assert [n for n, line in enumerate(stripped, 1) if line.lstrip().startswith("#")] == [1, 6, 9]
    for shell in (["sh"], ["bash", "--posix"]):
        ran = [subprocess.run([*shell, str(path), "a"], capture_output=True, text=True).stdout
               for path in (script, original)]
        assert ran[0] == ran[1] == \
            "# a here-document line: data\n1 a\nx\n\n# inside a quoted string: data\n\n", shell


def test_the_staged_shell_scripts_keep_their_lines_and_only_data_starts_with_a_hash(staged):
    scripts = stage.shell_scripts(staged.tree, staged.conffiles)
    sources = {e.target: e.source for e in stage.read_manifest()}
    assert staged.tree + "/etc/init.d/qlshadow" in scripts
    assert staged.tree + "/usr/lib/qlshadow/shell/common.sh" in scripts
    assert not [s for s in scripts if s[len(staged.tree):] in staged.conffiles]
    for script in scripts:
        with open(script, encoding="utf-8") as fh:
            text = fh.read()
        assert stage.shell_comment_lines(text) == [], script
        device = script[len(staged.tree):]
        source = sources.get(device) or os.path.join("shell", os.path.basename(device))
        with open(os.path.join(ROOT, source), encoding="utf-8") as fh:
            original = fh.read()
        comments = stage.shell_comment_lines(original)
        assert text.count("\n") == original.count("\n"), script
        assert [line for line in text.split("\n") if line] == \
            [line for n, line in enumerate(original.split("\n"), 1) if n not in comments and line]


def test_the_staged_catalogs_load_without_the_po_compiler_which_is_left_out(staged):
    lib = staged.tree + stage.LIB
    langs = os.listdir(os.path.join(ROOT, "app", "locale"))
    code = ("import sys; sys.path[:0] = sys.argv[1:3]; from qlshadow import i18n; "
            "print([i18n.translate(lang, 'Crons') != 'Crons' for lang in sys.argv[3:]], "
            "'qlshadow.msgfmt' in sys.modules)")
    ran = subprocess.run([sys.executable, "-I", "-c", code, lib, lib + "/vendor", *langs],
                         capture_output=True, text=True)

    assert not os.path.exists(os.path.join(lib, "qlshadow", "msgfmt.py"))
    assert langs == ["zh_CN"] and ran.stdout == "[True] False\n", ran.stderr
