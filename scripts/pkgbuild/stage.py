"""Stage the OpenWrt package's tree once, for both writers (ipk.py, apk.py).

The tree is conf/openwrt/files.txt's files plus the libraries pinned in
conf/openwrt/bundled.txt, copied from the building Python's install, which must hold exactly
those versions, less the modules nothing of ours imports (bundled.txt's ~PATH).

Python modules ship as sources with their docstrings and comments blanked, their white
space and function annotations left out, every token kept on its line (tracebacks still
point at the right line): the smallest package (docs/PERFORMANCE.md, "OpenWrt packages").
/usr/bin/qlshadow keeps the byte code Python compiles from them in RAM (/tmp), never beside
them. The other forms (`code=`, `blank=`,
`trim=`) are what scripts/bench_package_start.py compares.
"""
from __future__ import annotations

import ast
import functools
import glob
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tokenize
from dataclasses import dataclass

from . import feeds

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANIFEST = os.path.join(ROOT, "conf", "openwrt", "files.txt")
BUNDLED = os.path.join(ROOT, "conf", "openwrt", "bundled.txt")
SCRIPTS_DIR = os.path.join(ROOT, "conf", "openwrt")
LIB = "/usr/lib/qlshadow"
NAME = "qlshadow"

# Each writer's release and the Python minor version its feed ships.
RELEASES = {"24.10": (3, 11), "25.12": (3, 13)}

# What is never carried from a bundled distribution: byte code, native speedups and their
# C sources, type stubs.
_NOT_CARRIED = re.compile(r"(^|/)__pycache__/|\.(pyc|pyo|so|pyd|c|h|pyi)$|(^|/)py\.typed$")


class BuildError(Exception):
    """The package cannot be built as asked; the message says why in one sentence."""


@dataclass(frozen=True)
class Entry:
    """One line of files.txt."""
    source: str
    target: str
    mode: int
    conffile: bool


@dataclass(frozen=True)
class Bundle:
    """One line of bundled.txt."""
    name: str
    version: str
    carry: tuple
    leave_out: tuple
    unused: tuple = ()


@dataclass
class Staged:
    """A staged tree and what the writers need to know about it."""
    tree: str
    release: str
    conffiles: list
    bundled: list


def depends(release: str) -> list[str]:
    """The OpenWrt packages the package declares for a release."""
    if release not in RELEASES:
        raise BuildError(f"unknown OpenWrt release {release!r}: one of {', '.join(RELEASES)}")
    return feeds.depends(release)


def package_version(version: str, release: int) -> str:
    """Our version as both package managers get it: apk's rules ("0.1.0", 2 -> "0.1.0-r2")."""
    from .apk import apk_version

    try:
        return apk_version(version, release)
    except ValueError as exc:
        raise BuildError(str(exc)) from None


def app_version() -> str:
    """qlshadow.__version__, read from app/__init__.py without importing it."""
    with open(os.path.join(ROOT, "app", "__init__.py"), encoding="utf-8") as fh:
        match = re.search(r'^__version__ = "([^"]+)"$', fh.read(), re.MULTILINE)
    if not match:
        raise BuildError("app/__init__.py has no __version__ line")
    return match.group(1)


def read_manifest(path: str = MANIFEST) -> list[Entry]:
    """The lines of files.txt."""
    entries = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            if len(fields) not in (3, 4) or (len(fields) == 4 and fields[3] != "conffile") \
                    or not fields[1].startswith("/") or not re.fullmatch(r"0[0-7]{3}", fields[2]):
                raise BuildError(f"{path}:{number}: expected REPO_PATH /DEVICE/PATH 0MODE [conffile]")
            entries.append(Entry(fields[0], fields[1], int(fields[2], 8), len(fields) == 4))
    return entries


def read_bundled(path: str = BUNDLED) -> list[Bundle]:
    """The lines of bundled.txt."""
    bundles = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            name, _, version = fields[0].partition("==")
            carry = tuple(f for f in fields[1:] if not f.startswith(("!", "~")))
            if not name or not version or not carry:
                raise BuildError(f"{path}:{number}: expected NAME==VERSION PATH... [!PATH...] [~PATH...]")
            bundles.append(Bundle(name, version, carry,
                                  tuple(f[1:] for f in fields[1:] if f.startswith("!")),
                                  tuple(f[1:] for f in fields[1:] if f.startswith("~"))))
    return bundles


def check_bundled(bundles: list[Bundle]) -> None:
    """Refuse a building Python whose installed versions are not the pinned ones."""
    from importlib import metadata

    wrong = []
    for bundle in bundles:
        try:
            installed = metadata.version(bundle.name)
        except metadata.PackageNotFoundError:
            installed = "not installed"
        if installed != bundle.version:
            wrong.append(f"{bundle.name} {installed} (pinned {bundle.version})")
    if wrong:
        raise BuildError(f"{sys.executable} does not hold the versions conf/openwrt/bundled.txt "
                         f"pins: {', '.join(wrong)}; install them (pip install -e '.[test]')")


def _copy(source: str, target: str, mode: int) -> None:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copyfile(source, target)
    os.chmod(target, mode)


def _stage_entry(entry: Entry, tree: str) -> list[str]:
    """Copy one manifest entry into the tree; the device paths it made."""
    source = os.path.join(ROOT, entry.source)
    made = []
    if any(c in entry.source for c in "*?["):
        if not entry.target.endswith("/"):
            raise BuildError(f"files.txt: {entry.source} is a glob, so {entry.target} must end in /")
        for path in sorted(glob.glob(source)):
            if os.path.isfile(path):
                made.append(entry.target + os.path.basename(path))
                _copy(path, tree + made[-1], entry.mode)
    elif os.path.isdir(source):
        for folder, dirs, names in os.walk(source):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(names):
                rel = os.path.relpath(os.path.join(folder, name), source)
                if name.startswith(".") or _NOT_CARRIED.search(rel):
                    continue
                made.append(entry.target.rstrip("/") + "/" + rel)
                _copy(os.path.join(folder, name), tree + made[-1], entry.mode)
    elif os.path.isfile(source):
        made.append(entry.target)
        _copy(source, tree + entry.target, entry.mode)
    if not made:
        raise BuildError(f"files.txt: {entry.source} names no file")
    return made


def compile_catalogs(lib_dir: str) -> None:
    """Replace each staged translation source (.po) by the .mo that gettext reads, and leave
    out qlshadow.msgfmt, which qlshadow.i18n imports only to compile a .po with no .mo."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("qlshadow_stage_msgfmt",
                                                  os.path.join(ROOT, "app", "msgfmt.py"))
    msgfmt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(msgfmt)
    for po in glob.glob(os.path.join(lib_dir, "qlshadow", "locale", "*", "LC_MESSAGES", "*.po")):
        msgfmt.compile_file(po, po[:-3] + ".mo")
        os.chmod(po[:-3] + ".mo", os.stat(po).st_mode & 0o7777)
        os.remove(po)
    compiler = os.path.join(lib_dir, "qlshadow", "msgfmt.py")
    if os.path.exists(compiler):  # a manifest without app/ has none
        os.remove(compiler)


def _set_data_dir(path: str) -> None:
    """The packaged qlshadow.conf keeps data on the flash overlay (/srv/qlshadow)."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    text, count = re.subn(r"^QL_DATA_DIR=.*$", "QL_DATA_DIR=/srv/qlshadow", text, flags=re.MULTILINE)
    if count != 1:
        raise BuildError("conf/qlshadow.conf needs exactly one QL_DATA_DIR= line to set")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def _stage_bundle(bundle: Bundle, vendor: str, trim: bool) -> None:
    """Copy one bundled distribution's carried files, licence and METADATA into vendor/."""
    from importlib import metadata

    dist = metadata.distribution(bundle.name)
    carried = 0
    left_out = bundle.leave_out + (bundle.unused if trim else ())
    for file in dist.files or ():
        rel = str(file).replace(os.sep, "/")
        if not any(rel == c or rel.startswith(c.rstrip("/") + "/") for c in bundle.carry):
            continue
        if any(rel == x or rel.startswith(x.rstrip("/") + "/") for x in left_out):
            continue
        if _NOT_CARRIED.search(rel):
            continue
        _copy(str(dist.locate_file(file)), os.path.join(vendor, rel), 0o644)
        carried += 1
    if not carried:
        raise BuildError(f"bundled.txt: {bundle.name} carries no file ({' '.join(bundle.carry)})")
    licences = [f for f in dist.files or ()
                if os.path.basename(str(f)).upper().startswith(("LICENSE", "LICENCE", "COPYING"))]
    if not licences:
        raise BuildError(f"{bundle.name} {bundle.version} has no licence file to carry")
    _copy(str(dist.locate_file(licences[0])), os.path.join(vendor, f"LICENSE.{bundle.name}"), 0o644)
    # importlib.metadata finds the bundled versions (Flask reads its own; serve checks
    # waitress's against the range its callback lane was tested with). Its headers only:
    # the long description after them is a README nothing reads.
    info = os.path.join(vendor, f"{bundle.name}-{bundle.version}.dist-info", "METADATA")
    os.makedirs(os.path.dirname(info), exist_ok=True)
    text = dist.read_text("METADATA") or f"Name: {bundle.name}\nVersion: {bundle.version}\n"
    with open(info, "w", encoding="utf-8") as fh:
        fh.write(text.split("\n\n", 1)[0] + "\n")
    os.chmod(info, 0o644)


def find_python(release: str) -> str:
    """The interpreter whose byte code the release's Python loads (same minor version).

    QL_PYTHON_<major>_<minor> (e.g. QL_PYTHON_3_11) names it; else python3.X on PATH, else
    pyenv's newest 3.X."""
    major, minor = RELEASES[release]
    named = os.environ.get(f"QL_PYTHON_{major}_{minor}")
    candidates = [named] if named else []
    if not named:
        candidates.append(shutil.which(f"python{major}.{minor}"))
        pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
        candidates += sorted(glob.glob(os.path.join(pyenv, "versions", f"{major}.{minor}.*", "bin",
                                                    f"python{major}.{minor}")), reverse=True)
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() == str((major, minor)):
            return candidate
    raise BuildError(f"OpenWrt {release} runs Python {major}.{minor} and no python{major}.{minor} "
                     f"was found to compile its byte code: set QL_PYTHON_{major}_{minor}")


# --- docstrings and comments ------------------------------------------------------------------

_DOC_OWNERS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=]")


def docstrings(tree: ast.AST) -> list:
    """The docstring statements (ast.Expr) of a module's tree."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, _DOC_OWNERS) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                found.append(first)
    return found


def blank_docs(source: bytes) -> bytes:
    """A module's source with every docstring emptied and every comment removed, each line
    left where it was: the same code at the same line numbers (nothing of ours or of the
    bundled libraries reads __doc__ at run time: click's help only for click commands,
    which the package has none of)."""
    lines = source.splitlines(keepends=True)
    # AST columns are UTF-8 byte offsets, so the lines are cut as bytes; last first.
    for doc in sorted(docstrings(ast.parse(source)), key=lambda d: (d.lineno, d.col_offset),
                      reverse=True):
        first, last = doc.lineno - 1, doc.end_lineno - 1
        head, tail = lines[first][:doc.col_offset], lines[last][doc.end_col_offset:]
        if first == last:
            lines[first] = head + b'""' + tail
        else:
            # An empty line per line the docstring took, inside one string literal.
            lines[first:last + 1] = [head + b'"""\n'] + [b"\n"] * (last - first - 1) + \
                [b'"""' + tail]
    text = b"".join(lines)
    lines = text.splitlines(keepends=True)
    for token in tokenize.tokenize(io.BytesIO(text).readline):
        if token.type != tokenize.COMMENT:
            continue
        row, col = token.start
        if row <= 2 and _CODING.match(lines[row - 1]):
            continue
        line = lines[row - 1].decode("utf-8")
        ending = line[len(line.rstrip("\r\n")):]
        lines[row - 1] = (line[:col].rstrip() + ending).encode("utf-8")
    return b"".join(lines)


# Operators tokenize knows; two operators written together need a space when the first
# and the start of the second begin a longer one ("*" "*", "=" "=", "." "..").
_OPERATORS = tuple(tokenize.EXACT_TOKEN_TYPES)
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)


def _word(char: str) -> bool:
    return char.isalnum() or char == "_" or not char.isascii()


def _space_between(before, after) -> bool:
    """Whether two tokens of one line need a space between them to stay two tokens."""
    last, first = before.string[-1], after.string[0]
    if before.type == tokenize.NUMBER and (_word(first) or first == "."):
        return True  # 1 .real, 0x1 if
    if _word(last) and (_word(first) or after.type == tokenize.STRING or first in "'\""):
        return True  # names, keywords, numbers; a name before a string is never its prefix
    if before.type == tokenize.STRING and after.type == tokenize.STRING:
        return True  # "" "x" would open a triple-quoted string
    if before.type == tokenize.OP and after.type == tokenize.OP:
        joined = before.string + after.string[0]
        return any(op.startswith(joined) for op in _OPERATORS)
    return False


def _significant(tokens, dropped: frozenset = frozenset()) -> list:
    """What compact_layout() must keep of a module's tokens (but the indexes dropped): each
    one's type, text (but an indent's) and line."""
    kept = []
    for index, token in enumerate(tokens):
        if token.type in (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING) or index in dropped:
            continue
        text = "" if token.type == tokenize.INDENT else token.string
        # A dedent or the end of the file is on the line of what follows, trailing blank
        # lines included; the tokens that follow keep their own lines.
        row = 0 if token.type in (tokenize.DEDENT, tokenize.ENDMARKER) else token.start[0]
        kept.append((token.type, text, row))
    return kept


def compact_layout(source: bytes, annotations: bool = True) -> bytes:
    """A module's source rewritten with the least white space that keeps its tokens: one
    space per indentation level, no space between tokens that need none, no comment but a
    coding line; every token stays on its line (the same code at the same line numbers).
    Strings, f-strings included, are kept as written. Without annotations, the annotations
    of function parameters and returns are left out too (variables' stay: dataclasses and
    named tuples are made from them). Raises BuildError if the result's tokens are not the
    source's, less the annotations (which the module's syntax tree locates)."""
    lines = source.splitlines(keepends=True)
    tokens = list(tokenize.tokenize(io.BytesIO(source).readline))
    dropped = set() if annotations else _annotation_tokens(source, lines, tokens)
    out: list = []
    row = 1           # the line out's end is on
    depth = 0         # indentation level
    brackets = 0      # open ( [ {
    line_start = True
    prev = None
    fstrings = 0      # open f-strings (Python 3.12+ tokenizes their parts)
    fstring_from = None
    for index, token in enumerate(tokens):
        if index in dropped:
            continue
        kind = token.type
        if kind == tokenize.ENCODING:
            if token.string != "utf-8":
                raise BuildError(f"only UTF-8 sources are compacted, not {token.string}")
            continue
        if kind == tokenize.ENDMARKER:
            continue
        if kind == tokenize.COMMENT:
            if token.start[0] <= 2 and _CODING.match(lines[token.start[0] - 1]):
                out.append("\n" * (token.start[0] - row) + " " * (not line_start) + token.string)
                row = token.start[0]
            continue
        if fstrings:
            if kind == _FSTRING_START:
                fstrings += 1
            elif kind == _FSTRING_END:
                fstrings -= 1
            if fstrings:
                continue
            token = tokenize.TokenInfo(tokenize.STRING, _text(lines, fstring_from, token.end),
                                       fstring_from, token.end, token.line)
            kind = tokenize.STRING
        elif kind == _FSTRING_START:
            fstrings, fstring_from = 1, token.start
            continue
        if kind == tokenize.INDENT:
            depth += 1
            continue
        if kind == tokenize.DEDENT:
            depth -= 1
            continue
        if kind == tokenize.NL:
            continue
        if kind == tokenize.NEWLINE:
            line_start, prev = True, None
            continue
        start_row = token.start[0]
        if line_start:
            out.append("\n" * (start_row - row) + " " * depth)
            line_start = False
        elif start_row > row:
            out.append(("\n" if brackets else "\\\n") * (start_row - row))
        elif prev is not None and _space_between(prev, token):
            out.append(" ")
        out.append(token.string)
        row = token.end[0]
        prev = token
        if kind == tokenize.OP:
            brackets += token.string in "([{"
            brackets -= token.string in ")]}"
    text = ("".join(out) + "\n").encode("utf-8")
    if _significant(tokenize.tokenize(io.BytesIO(text).readline)) != \
            _significant(tokens, frozenset(dropped)):
        raise BuildError("compacting a module changed its tokens")
    return text


def _annotation_tokens(source: bytes, lines: list, tokens: list) -> set:
    """The indexes in tokens of the function annotations and the ":" or "->" before each."""
    def char_position(row: int, byte_col: int) -> tuple:
        return row, len(lines[row - 1][:byte_col].decode("utf-8"))

    spans = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.arg) and node.annotation is not None:
            found = node.annotation
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns:
            found = node.returns
        else:
            continue
        spans.append((char_position(found.lineno, found.col_offset),
                      char_position(found.end_lineno, found.end_col_offset)))
    dropped = set()
    starts = {token.start: index for index, token in enumerate(tokens)}
    for start, end in spans:
        index = starts[start]
        before, parens = index - 1, 0
        while tokens[before].type in (tokenize.NL, tokenize.COMMENT) or tokens[before].string == "(":
            dropped.add(before)
            parens += tokens[before].string == "("
            before -= 1
        if tokens[before].string not in (":", "->"):
            raise BuildError(f"an annotation at line {start[0]} follows {tokens[before].string!r}")
        dropped.add(before)
        while index < len(tokens) and (tokens[index].start < end or parens):
            if tokens[index].start >= end and tokens[index].string == ")":
                parens -= 1
            dropped.add(index)
            index += 1
    return dropped


def _text(lines: list, start: tuple, end: tuple) -> str:
    """The source text from one (row, column) to another, columns counted in characters."""
    rows = [line.decode("utf-8") for line in lines[start[0] - 1:end[0]]]
    if len(rows) == 1:
        return rows[0][start[1]:end[1]]
    return rows[0][start[1]:] + "".join(rows[1:-1]) + rows[-1][:end[1]]


def blank_tree(lib_dir: str) -> None:
    """blank_docs() then compact_layout() without function annotations, every .py under
    lib_dir, in place (nothing shipped reads a function's annotations: tests/test_pkgbuild.py)."""
    for folder, _dirs, names in os.walk(lib_dir):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, "rb") as fh:
                    source = fh.read()
                with open(path, "wb") as fh:
                    fh.write(_shipped_source(source))


@functools.cache
def _shipped_source(source: bytes) -> bytes:
    """A module as shipped. Kept per process: tokenizing is most of a staging's time, and a
    build (or a test session) stages the same sources for each release and package. With
    QL_PKGBUILD_CACHE set, kept in that folder too, for the next builds (the test suite's
    builds share one per run)."""
    folder = os.environ.get("QL_PKGBUILD_CACHE", "")
    if not folder:
        return compact_layout(blank_docs(source), annotations=False)
    # Named by what makes the result: the source, this module's code and the Python whose
    # tokenizer read it.
    key = hashlib.sha256(_compactor_id() + source).hexdigest()
    path = os.path.join(folder, key[:2], key)
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        pass
    shipped = compact_layout(blank_docs(source), annotations=False)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    part = f"{path}.{os.getpid()}.part"
    with open(part, "wb") as fh:
        fh.write(shipped)
    os.replace(part, path)  # whole or absent to a build reading at the same time
    return shipped


@functools.cache
def _compactor_id() -> bytes:
    with open(__file__, "rb") as fh:
        return hashlib.sha256(fh.read()).digest() + sys.version.encode() + b"\0"


# --- shell comments ---------------------------------------------------------------------------

def shell_comment_lines(text: str, shell: str = "sh") -> list:
    """The numbers of a shell script's lines that are comments alone (the #! line aside).

    A line whose first word starts with # is a comment unless a quoted string or a here-
    document holds it. The shell itself tells them apart: with the line replaced by a lone
    ")", `sh -n` fails where the line is code and passes where it is data. A comment leaves
    the shell reading code, so the lines right after one that start with # are comments too."""
    lines = text.split("\n")
    found = []
    for number, line in enumerate(lines, 1):
        if not line.lstrip().startswith("#") or (number == 1 and line.startswith("#!")):
            continue
        if found and found[-1] == number - 1:
            found.append(number)
            continue
        probe = "\n".join(lines[:number - 1] + [")"] + lines[number:])
        parsed = subprocess.run([shell, "-n"], input=probe, capture_output=True, text=True)
        if parsed.returncode != 0:
            found.append(number)
    return found


def strip_shell_comments(path: str, shell: str = "sh") -> None:
    """Empty a shell script's comment lines in place, every line kept where it was; refuses a
    script that does not parse before or after."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    try:
        stripped = _without_comments(text, shell)
    except BuildError as exc:
        raise BuildError(f"{path}: {exc}") from None
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(stripped)


@functools.cache
def _without_comments(text: str, shell: str) -> str:
    """A script's text with its comment lines emptied (one `sh -n` per comment block: kept
    per process, as _shipped_source); BuildError when it cannot be done safely."""
    if subprocess.run([shell, "-n"], input=text, capture_output=True, text=True).returncode:
        raise BuildError(f"not a script {shell} -n reads")
    lines = text.split("\n")
    for number in shell_comment_lines(text, shell):
        lines[number - 1] = ""
    stripped = "\n".join(lines)
    if subprocess.run([shell, "-n"], input=stripped, capture_output=True, text=True).returncode:
        raise BuildError("leaving out its comments broke it")
    return stripped


def shell_scripts(tree: str, conffiles: list) -> list:
    """The staged shell scripts (a #!/bin/sh line or a .sh name) that are not conffiles."""
    found = []
    for folder, _dirs, names in os.walk(tree):
        for name in sorted(names):
            path = os.path.join(folder, name)
            if path[len(tree):] in conffiles or name.endswith(".py"):
                continue
            with open(path, "rb") as fh:
                head = fh.read(64)
            if name.endswith(".sh") or head.startswith((b"#!/bin/sh", b"#! /bin/sh")):
                found.append(path)
    return sorted(found)


# --- byte code -------------------------------------------------------------------------------

# Run by the release's Python: byte code of each module, named in tracebacks by its device
# path, hash-stamped (no source mtime in it: reproducible), with a fixed hash seed (set
# constants are marshalled in hash order). argv: LIB DEVICE_LIB FORM STRIP, FORM "legacy"
# (sourceless x.pyc beside each module, the sources removed) or "cache" (sources kept,
# __pycache__/x.cpython-3X.pyc, checked against the source's hash); STRIP "1" drops the
# docstrings from the tree before compiling (asserts stay: no -OO).
_COMPILE = """
import ast, importlib.util, os, sys
lib, device, form, strip = sys.argv[1:5]
from importlib._bootstrap_external import _code_to_hash_pyc
owners = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
for folder, dirs, names in os.walk(lib):
    dirs.sort()
    for name in sorted(names):
        if not name.endswith(".py"):
            continue
        path = os.path.join(folder, name)
        with open(path, "rb") as fh:
            source = fh.read()
        tree = ast.parse(source)
        if strip == "1":
            for node in ast.walk(tree):
                body = getattr(node, "body", None)
                if isinstance(node, owners) and body and isinstance(body[0], ast.Expr) \\
                        and isinstance(body[0].value, ast.Constant) \\
                        and isinstance(body[0].value.value, str):
                    if len(body) == 1:
                        body[0] = ast.copy_location(ast.Pass(), body[0])
                    else:
                        del body[0]
        code = compile(tree, device + path[len(lib):], "exec", dont_inherit=True, optimize=0)
        checked = form == "cache"
        data = _code_to_hash_pyc(code, importlib.util.source_hash(source), checked)
        target = importlib.util.cache_from_source(path) if checked else path + "c"
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as fh:
            fh.write(data)
        os.chmod(target, 0o644)
        if not checked:
            os.remove(path)
"""

CODE_FORMS = ("sources", "sources+bytecode", "bytecode")


def compile_tree(lib_dir: str, python: str, *, keep_sources: bool = False,
                 strip: bool = False) -> None:
    """Compile every .py under lib_dir for that Python: sourceless legacy byte code, or
    (keep_sources) __pycache__ byte code beside the sources."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([python, "-I", "-c", _COMPILE, lib_dir, LIB,
                           "cache" if keep_sources else "legacy", "1" if strip else "0"],
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"{python} could not compile the package: {done.stderr.strip()[-500:]}")


def stage(tree: str | os.PathLike, release: str, *, manifest: str = MANIFEST, bundled: str = BUNDLED,
          code: str = "sources", blank: bool = True, trim: bool = True) -> Staged:
    """Stage the package for a release into the empty folder tree.

    As shipped: sources with docstrings and comments blanked (blank), without the bundled
    modules nothing imports (trim). For comparison only (scripts/bench_package_start.py):
    code="bytecode" (sourceless byte code for the release's Python, docstrings stripped when
    blank) or "sources+bytecode" (both, as a pip install leaves them)."""
    tree = os.fspath(tree)
    if release not in RELEASES:
        raise BuildError(f"unknown OpenWrt release {release!r}: one of {', '.join(RELEASES)}")
    if code not in CODE_FORMS:
        raise BuildError(f"unknown code form {code!r}: one of {', '.join(CODE_FORMS)}")
    bundles = read_bundled(bundled)
    check_bundled(bundles)
    python = find_python(release) if code != "sources" else None
    entries = read_manifest(manifest)
    conffiles = []
    for entry in entries:
        made = _stage_entry(entry, tree)
        if entry.conffile:
            conffiles += made
    compile_catalogs(tree + LIB)
    if os.path.isfile(tree + "/etc/qlshadow/qlshadow.conf"):
        _set_data_dir(tree + "/etc/qlshadow/qlshadow.conf")
    vendor = tree + LIB + "/vendor"
    for bundle in bundles:
        _stage_bundle(bundle, vendor, trim)
    with open(os.path.join(vendor, "VERSIONS"), "w", encoding="utf-8") as fh:
        fh.writelines(f"{b.name} {b.version}\n" for b in bundles)
    os.chmod(os.path.join(vendor, "VERSIONS"), 0o644)
    if blank and code != "bytecode":
        blank_tree(tree + LIB)
    if blank:
        for script in shell_scripts(tree, conffiles):
            strip_shell_comments(script)
    if code != "sources":
        compile_tree(tree + LIB, python, keep_sources=code == "sources+bytecode",
                     strip=blank and code == "bytecode")
    # Modes are set, never inherited from the umask or the checkout; "/" itself included.
    for folder, _dirs, _files in os.walk(tree):
        os.chmod(folder, 0o755)
    return Staged(tree=tree, release=release, conffiles=sorted(conffiles),
                  bundled=[f"{b.name}=={b.version}" for b in bundles])
