"""QL_NOTIFY_FILE: the notification variables a QingLong config.sh assigns, read without
running it."""
from __future__ import annotations

import re

from qlshadow.config.errors import ConfigError
from qlshadow.config.keys import NOTIFY_KEYS, NOTIFY_UNUSED_KEYS


# A shell assignment `[export ]NAME=`; a function's first line; the words that open and
# close a shell block (an assignment inside one may not run: it is not read).
_ASSIGNMENT = re.compile(r"[ \t]*(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_]*)=")
_FUNCTION = re.compile(r"[ \t]*(?:function[ \t]+[\w-]+|[\w-]+[ \t]*\(\))")
_BLOCK_WORDS = {"if": 1, "case": 1, "for": 1, "while": 1, "until": 1, "select": 1,
                "fi": -1, "esac": -1, "done": -1}
_NAME_START = re.compile(r"[A-Za-z_{(0-9@*#?$!-]")


class _Unreadable(Exception):
    """A value that only running the shell would give (an expansion, a command)."""


def _shell_word(text: str, i: int) -> tuple[str, int]:
    """The value of the shell word at text[i:] and the index after it, without running
    anything: quotes and backslashes as sh reads them. Raises _Unreadable for `$...`,
    backquotes or an unterminated quote (then the index is the end of the line)."""
    out = []
    while i < len(text):
        c = text[i]
        if c in " \t\n;&|<>":
            break
        if c == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise _Unreadable("a quote is not closed")
            out.append(text[i + 1:end])
            i = end + 1
        elif c == '"':
            i += 1
            while True:
                if i >= len(text):
                    raise _Unreadable("a quote is not closed")
                c = text[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\" and i + 1 < len(text):
                    nxt = text[i + 1]
                    if nxt != "\n":  # a backslash-newline joins the lines
                        out.append(nxt if nxt in '$`"\\' else c + nxt)
                    i += 2
                    continue
                if c == "`" or (c == "$" and _NAME_START.match(text, i + 1)):
                    raise _Unreadable("it needs the shell to expand it")
                out.append(c)
                i += 1
        elif c == "\\":
            if text[i + 1:i + 2] != "\n":
                out.append(text[i + 1:i + 2])
            i += 2
        elif c == "`" or (c == "$" and _NAME_START.match(text, i + 1)):
            raise _Unreadable("it needs the shell to expand it")
        else:
            out.append(c)
            i += 1
    return "".join(out), i


def _skip_parens(text: str, i: int) -> int:
    """The index after the `)` that closes the array starting at text[i] == '('."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c in "'\"":
            end = text.find(c, i + 1)
            i = len(text) if end < 0 else end + 1
            continue
        if c == "#" and (i == 0 or text[i - 1] in " \t\n("):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        depth += {"(": 1, ")": -1}.get(c, 0)
        i += 1
        if depth == 0:
            break
    return i


def read_ql_notify_file(path: str) -> tuple[dict, tuple]:
    """The notification variables a QingLong config.sh (or any file of KEY=VALUE and
    `export KEY="VALUE"` lines) assigns, and one warning per line that sets one in a way
    we cannot read. Nothing is run; every other line is skipped (comments, arrays,
    functions, other settings). Raises ConfigError when the file cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(f"cannot read QL_NOTIFY_FILE {path}: {exc.strerror}") from None
    wanted = (NOTIFY_KEYS | NOTIFY_UNUSED_KEYS) - {"QL_NOTIFY_FILE"}
    values: dict = {}
    warnings: list = []
    i, line, depth, braces, pending = 0, 1, 0, 0, False
    while i < len(text):
        end = _line_end(text, i)
        start = i
        match = _ASSIGNMENT.match(text, i, end)
        code = re.sub(r"'[^']*'|\"[^\"]*\"|(^|\s)#.*", " ", text[i:end])
        if braces > 0 or pending or not match:
            # Not an assignment we read: skip the line, keeping count of the functions
            # (their bodies run only when called) and of if/case/loop blocks.
            if braces > 0 or (pending and "{" in code):
                braces += code.count("{") - code.count("}")
                pending = False
            elif _FUNCTION.match(code):
                braces = code.count("{") - code.count("}")
                pending = "{" not in code
            else:
                for word in re.findall(r"(?:^|[;&|]|\bthen|\bdo)\s*(\w+)", code):
                    depth = max(depth + _BLOCK_WORDS.get(word, 0), 0)
            i, line = end + 1, line + 1
            continue
        key, i = match.group(1), match.end()
        value = reason = None
        if text.startswith("(", i):
            i = _skip_parens(text, i)  # an array: never a notification variable
        else:
            try:
                value, i = _shell_word(text, i)
            except _Unreadable as exc:
                reason, i = str(exc), end
        rest = text[i:_line_end(text, i)].strip()
        if reason is None and rest and not rest.startswith(("#", ";")):
            reason = "more follows it on the line"
        if reason is None and depth > 0:
            reason = "it sits inside an if, case or loop"
        if key in wanted and (reason or value is not None):
            if reason:
                warnings.append(f"{path}:{line}: {key} not read: {reason}")
            elif value:
                values[key] = value
            else:
                values.pop(key, None)  # an empty value unsets, as in the shell
        if reason is None and rest.startswith(";"):  # `A=1; B=2`: go on after the `;`
            i = text.index(";", i) + 1
        else:
            i = _line_end(text, i) + 1
        line += text.count("\n", start, i)
    return values, tuple(warnings)


def _line_end(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end
