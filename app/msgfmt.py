"""A gettext catalog compiler: a .po source into the .mo file the standard library reads.

The formats are GNU gettext's (the manual's "PO Files" and "MO Files"); this covers what
our one catalog uses: msgid, msgid_plural, msgstr[n], msgctxt, continued strings, the
usual backslash escapes and `#, fuzzy` entries (left out, as msgfmt leaves them out).
Pure standard library, so the build, the package staging and the source tree's first use
need neither Babel nor GNU gettext.
"""
from __future__ import annotations

import ast
import struct

MAGIC = 0x950412DE


class PoError(ValueError):
    """A .po file this compiler cannot read; the message names the line."""


def _string(text: str, where: str) -> str:
    """A quoted PO string's value (C escapes, as Python reads them)."""
    text = text.strip()
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        raise PoError(f"{where}: expected a quoted string")
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise PoError(f"{where}: a string with a bad escape") from None


def parse(text: str, name: str = "<po>") -> dict:
    """{msgid: msgstr} of a .po text; a plural entry is keyed (msgid, plural) with a list of
    forms, a context's entry "context\\x04msgid". Fuzzy and untranslated entries are left out."""
    entries: list = []
    current: dict = {}
    field = None
    fuzzy = False

    def finish():
        nonlocal current, fuzzy
        if "msgid" in current:
            entries.append((current, fuzzy))
        current, fuzzy = {}, False

    for number, raw in enumerate(text.splitlines(), 1):
        where = f"{name}:{number}"
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if "msgid" in current and field is not None and field != "msgctxt":
                finish()
                field = None
            if line.startswith("#,") and "fuzzy" in line[2:].replace(",", " ").split():
                fuzzy = True
            continue
        if line.startswith('"'):
            if field is None:
                raise PoError(f"{where}: a continued string with no keyword before it")
            current[field] += _string(line, where)
            continue
        keyword, _, rest = line.partition(" ")
        if keyword in ("msgctxt", "msgid") and ("msgstr" in current or any(
                k.startswith("msgstr[") for k in current)):
            finish()
        if keyword not in ("msgctxt", "msgid", "msgid_plural", "msgstr") and not (
                keyword.startswith("msgstr[") and keyword.endswith("]")
                and keyword[7:-1].isdigit()):
            raise PoError(f"{where}: unknown keyword {keyword[:20]!r}")
        if keyword in current:
            raise PoError(f"{where}: {keyword} twice in one entry")
        current[keyword] = _string(rest, where)
        field = keyword
    finish()

    messages: dict = {}
    for entry, is_fuzzy in entries:
        msgid = entry["msgid"]
        if "msgctxt" in entry:
            msgid = entry["msgctxt"] + "\x04" + msgid
        if "msgid_plural" in entry:
            forms = []
            while f"msgstr[{len(forms)}]" in entry:
                forms.append(entry[f"msgstr[{len(forms)}]"])
            key, value = (msgid, entry["msgid_plural"]), forms
            done = forms and all(forms)
        else:
            key, value = msgid, entry.get("msgstr", "")
            done = bool(value)
        if key in messages:
            raise PoError(f"{name}: {msgid[:40]!r} is defined twice")
        if done and (not is_fuzzy or msgid == ""):
            messages[key] = value
    return messages


def compile_mo(messages: dict) -> bytes:
    """The .mo bytes of parse()'s messages: originals sorted, no hash table."""
    pairs = []
    for key, value in messages.items():
        if isinstance(key, tuple):
            pairs.append(("\x00".join(key).encode(), "\x00".join(value).encode()))
        else:
            pairs.append((key.encode(), value.encode()))
    pairs.sort()
    count = len(pairs)
    originals_at = 7 * 4
    translations_at = originals_at + count * 8
    data_at = translations_at + count * 8
    table, data = [], bytearray()
    for strings in ([o for o, _ in pairs], [t for _, t in pairs]):
        for string in strings:
            table.append((len(string), data_at + len(data)))
            data += string + b"\x00"
    header = struct.pack("<7I", MAGIC, 0, count, originals_at, translations_at, 0, data_at)
    index = b"".join(struct.pack("<2I", length, offset) for length, offset in table)
    return header + index + bytes(data)


def compile_file(po_path: str, mo_path: str) -> None:
    """Compile one .po file into a .mo file."""
    with open(po_path, encoding="utf-8") as fh:
        data = compile_mo(parse(fh.read(), po_path))
    with open(mo_path, "wb") as fh:
        fh.write(data)
