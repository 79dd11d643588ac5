"""Messages in the reader's language: English (the source strings) or Simplified Chinese.

`_()` marks a sentence and translates it into the language in effect: the page's choice
for the request it renders (views/page/hooks.py sets it), else the process default (QL_LANG,
set by the server, the notify tick and `notify --test`). English needs no catalog, so a
process that stays English never reads one; another language's catalog is read on the
first sentence translated, from its compiled .mo beside the package, or compiled in
memory from the .po source in a source tree (app/msgfmt.py). The callback path never
translates anything.
"""
from __future__ import annotations

import contextvars
import os
import threading

LANGUAGES = ("en", "zh_CN")
DOMAIN = "qlshadow"
LOCALE_DIR = os.path.join(os.path.dirname(__file__), "locale")

_default = "en"
_current: contextvars.ContextVar = contextvars.ContextVar("qlshadow_lang", default=None)
_catalogs: dict = {}
_lock = threading.Lock()


def N_(message: str) -> str:
    """Mark a sentence for the catalog where it is defined; _() translates it where shown."""
    return message


def set_default(lang: str) -> None:
    """The process's language when no request chose one (QL_LANG)."""
    global _default
    _default = lang


def current() -> str:
    return _current.get() or _default


def use(lang: str | None):
    """Make `lang` the language of this thread's context; returns the token for reset()."""
    return _current.set(lang)


def reset(token) -> None:
    _current.reset(token)


def catalog(lang: str):
    """The translations of one language (loaded once per process), or None for English."""
    if lang == "en":
        return None
    found = _catalogs.get(lang)
    if found is None:
        with _lock:
            found = _catalogs.get(lang) or _load(lang)
            _catalogs[lang] = found
    return found


def _load(lang: str):
    import gettext
    import io
    base = os.path.join(LOCALE_DIR, lang, "LC_MESSAGES", DOMAIN)
    try:
        with open(base + ".mo", "rb") as fh:
            return gettext.GNUTranslations(fh)
    except FileNotFoundError:
        pass  # a source tree: the .po is compiled at build time, here in memory
    from qlshadow.msgfmt import compile_mo, parse
    with open(base + ".po", encoding="utf-8") as fh:
        return gettext.GNUTranslations(io.BytesIO(compile_mo(parse(fh.read(), base + ".po"))))


def translate(lang: str, message: str) -> str:
    """One sentence in `lang`; the English source when the catalog lacks it."""
    found = catalog(lang)
    return message if found is None else found.gettext(message)


def translate_plural(lang: str, singular: str, plural: str, n: int) -> str:
    found = catalog(lang)
    if found is None:
        return singular if n == 1 else plural
    return found.ngettext(singular, plural, n)


def _(message: str) -> str:
    """One sentence in the language in effect."""
    lang = _current.get() or _default
    return message if lang == "en" else translate(lang, message)


def ngettext(singular: str, plural: str, n: int) -> str:
    """A sentence about n things in the language in effect."""
    return translate_plural(current(), singular, plural, n)
