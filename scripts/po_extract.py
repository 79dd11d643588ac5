"""The sentences marked for translation in app/, and the catalog kept in step with them.

    python scripts/po_extract.py          # print what the catalog lacks and what it has left over
    python scripts/po_extract.py --write  # add the missing ones (empty msgstr), drop the others

Marked are the first (and, for ngettext, second) string argument of `_()`, `N_()`,
`gettext()` and `ngettext()` in app/**/*.py, and `_()`, `gettext()`, `ngettext()` and
`{% trans %}` blocks in app/templates (read by Jinja's own extractor, with the page's
`trimmed` policy). tests/test_i18n.py holds the catalog and these equal both ways.
"""
from __future__ import annotations

import ast
import glob
import io
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP = os.path.join(ROOT, "app")
PO = os.path.join(APP, "locale", "zh_CN", "LC_MESSAGES", "qlshadow.po")
CALLS = ("_", "N_", "gettext", "ngettext")


def python_messages(path: str) -> dict:
    """{msgid or (msgid, plural): "file:line"} of one Python file."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    found = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in CALLS and node.args):
            continue
        texts = [a.value for a in node.args[:2] if isinstance(a, ast.Constant)
                 and isinstance(a.value, str)]
        if node.func.id == "ngettext" and len(texts) == 2:
            found[tuple(texts)] = f"{os.path.relpath(path, ROOT)}:{node.lineno}"
        elif texts and isinstance(node.args[0], ast.Constant):
            found[texts[0]] = f"{os.path.relpath(path, ROOT)}:{node.lineno}"
    return found


def template_messages(path: str) -> dict:
    """{msgid or (msgid, plural): "file:line"} of one template."""
    from jinja2.ext import babel_extract
    with open(path, "rb") as fh:
        data = fh.read()
    found = {}
    for line, _func, message, _ in babel_extract(io.BytesIO(data), ("_", "gettext", "ngettext"),
                                                 [], {"trimmed": "true"}):
        if isinstance(message, tuple):
            message = tuple(m for m in message if m)
            message = message[0] if len(message) == 1 else message
        if message:
            found[message] = f"{os.path.relpath(path, ROOT)}:{line}"
    return found


def marked() -> dict:
    """Every marked sentence of the package, with where it first appears."""
    found: dict = {}
    for path in sorted(glob.glob(os.path.join(APP, "**", "*.py"), recursive=True)):
        for key, where in python_messages(path).items():
            found.setdefault(key, where)
    for path in sorted(glob.glob(os.path.join(APP, "templates", "*.html"))):
        for key, where in template_messages(path).items():
            found.setdefault(key, where)
    return found


def _quote(text: str) -> str:
    escaped = (text.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t")
               .replace("\n", "\\n"))
    return f'"{escaped}"'


def _entries(po_text: str) -> list:
    """The catalog's entries as text blocks (the header first), blank-line separated."""
    return [block for block in po_text.strip().split("\n\n") if block.strip()]


def _parse():
    """app/msgfmt.py's parse, loaded from its file (this script imports no package)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("po_extract_msgfmt",
                                                  os.path.join(APP, "msgfmt.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.parse


def write(po_path: str = PO) -> tuple:
    """Add missing sentences (empty msgstr), drop the ones no longer marked, and name where
    each is marked now."""
    parse = _parse()
    with open(po_path, encoding="utf-8") as fh:
        text = fh.read()
    wanted = marked()
    blocks = _entries(text)
    kept, dropped = [blocks[0]], 0
    for block in blocks[1:]:
        key = next(iter(parse(block + "\n", po_path).keys() or [None]), None)
        if key is None:  # untranslated: keep it if still marked
            key = _msgid_of(block)
        if key in wanted:  # kept, its source location brought up to date
            lines = [line for line in block.splitlines() if not line.startswith("#: ")]
            kept.append("\n".join([f"#: {wanted.pop(key)}", *lines]))
        else:
            dropped += 1
    for key, where in wanted.items():
        if isinstance(key, tuple):
            kept.append(f"#: {where}\nmsgid {_quote(key[0])}\nmsgid_plural {_quote(key[1])}\n"
                        'msgstr[0] ""')
        else:
            kept.append(f"#: {where}\nmsgid {_quote(key)}\nmsgstr \"\"")
    with open(po_path, "w", encoding="utf-8") as fh:
        fh.write("\n\n".join(kept) + "\n")
    return len(wanted), dropped


def _msgid_of(block: str):
    """The key of an entry parse() leaves out (no translation yet)."""
    msgid, plural, field = "", None, None
    for line in block.splitlines():
        line = line.strip()
        if line.startswith("msgid_plural "):
            field, plural = "plural", ast.literal_eval(line[13:])
        elif line.startswith("msgid "):
            field, msgid = "msgid", ast.literal_eval(line[6:])
        elif line.startswith("msgstr"):
            field = None
        elif line.startswith('"') and field == "msgid":
            msgid += ast.literal_eval(line)
        elif line.startswith('"') and field == "plural":
            plural += ast.literal_eval(line)
    return (msgid, plural) if plural is not None else msgid


def main(argv: list) -> int:
    import argparse
    parser = argparse.ArgumentParser(
        prog="po_extract.py", description="Compare the sentences marked in app/ with the "
        "zh_CN catalog (exit 1 when they differ), or bring the catalog in step.")
    parser.add_argument("--write", action="store_true",
                        help="add the missing sentences with an empty msgstr, drop the others")
    args = parser.parse_args(argv[1:])
    if args.write:
        added, dropped = write()
        print(f"{PO}: {added} added, {dropped} dropped")
        return 0
    parse = _parse()
    with open(PO, encoding="utf-8") as fh:
        have = set(parse(fh.read(), PO)) - {""}
    wanted = marked()
    for key in sorted(set(wanted) - have, key=str):
        print(f"missing: {key!r} ({wanted[key]})")
    for key in sorted(have - set(wanted), key=str):
        print(f"left over: {key!r}")
    return 1 if set(wanted) ^ have else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
