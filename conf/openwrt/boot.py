"""/usr/lib/qlshadow/qlshadow_boot.py: what /usr/bin/qlshadow imports before qlshadow itself.

OpenWrt ships `unicodedata` in python3-codecs (0.8 MB compressed with the CJK codecs), which
the package does not depend on. Two things would still import it on every start: the `idna`
codec, which socket.getaddrinfo applies to every str host (even "127.0.0.1"), and
werkzeug.utils' module-level `import unicodedata` (for secure_filename and non-ASCII
download names, which qlshadow never uses). Without python3-codecs this module registers
an ASCII-only `idna` codec and puts a stand-in `unicodedata` in sys.modules whose functions
name the package to install; with python3-codecs installed it does nothing.

Likewise `decimal` (python3-decimal, 0.14 MB compressed): peewee imports it at load time
(for DecimalField, and to register Decimal with sqlite3) and Flask's JSON provider checks
values against decimal.Decimal; qlshadow stores no decimal number. Without python3-decimal a
stand-in module gives them the names they touch: a Decimal that is a float (what the
PostgreSQL driver itself falls back to without decimal), and a context whose rounding is
Python's; exact decimal arithmetic needs the package.
"""
import codecs
import sys

NEEDS = ("needs the OpenWrt package python3-codecs "
         "(opkg install python3-codecs / apk add python3-codecs)")

# East Asian Wide and Fullwidth blocks (Unicode's EastAsianWidth.txt, W and F), enough for
# the CLI's column widths (app/cli/textout.py) to count CJK cron names as two cells.
_WIDE = ((0x1100, 0x115F), (0x231A, 0x231B), (0x2E80, 0x303E), (0x3041, 0x33FF),
         (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xA000, 0xA4CF), (0xA960, 0xA97F),
         (0xAC00, 0xD7A3), (0xF900, 0xFAFF), (0xFE10, 0xFE19), (0xFE30, 0xFE6F),
         (0xFF00, 0xFF60), (0xFFE0, 0xFFE6), (0x1F300, 0x1F64F), (0x1F900, 0x1F9FF),
         (0x20000, 0x2FFFD), (0x30000, 0x3FFFD))


def east_asian_width(char: str) -> str:
    """"W" for a character of the wide blocks above, else "N"."""
    point = ord(char)
    return "W" if any(low <= point <= high for low, high in _WIDE) else "N"


def _refuse(*_args, **_kwargs):
    raise RuntimeError(f"this needs unicodedata, which {NEEDS}")


def _stand_in():
    module = type(sys)("unicodedata", "Stand-in: unicodedata " + NEEDS + ".")
    for name in ("normalize", "is_normalized", "category", "bidirectional", "combining",
                 "decomposition", "decimal", "digit", "numeric", "mirrored", "name", "lookup"):
        setattr(module, name, _refuse)
    module.east_asian_width = east_asian_width
    return module


def _check_labels(text: str) -> None:
    labels = text.split(".")
    if labels[-1] == "":
        labels.pop()  # a trailing dot: the root
    if any(not 0 < len(label) < 64 for label in labels):
        raise UnicodeError(f"host name {text!r} has an empty label or one over 63 characters")


def idna_encode(text, errors="strict"):
    if not text.isascii():
        raise UnicodeError(f"the non-ASCII host name {text!r} {NEEDS}")
    if text:
        _check_labels(text)
    return text.encode("ascii"), len(text)


def idna_decode(data, errors="strict"):
    data = bytes(data)
    if not data.isascii():
        raise UnicodeError(f"a non-ASCII host name {NEEDS}")
    text = data.decode("ascii")
    if any(label.lower().startswith("xn--") for label in text.split(".")):
        raise UnicodeError(f"decoding the punycode host name {text!r} {NEEDS}")
    return text, len(data)


def _search(name):
    if name == "idna":
        return codecs.CodecInfo(idna_encode, idna_decode, name="idna")
    return None


def install() -> bool:
    """The stand-ins, if unicodedata is missing; whether they were installed."""
    try:
        import unicodedata  # noqa: F401
        return False
    except ImportError:
        pass
    codecs.register(_search)
    sys.modules["unicodedata"] = _stand_in()
    return True


DECIMAL_NEEDS = ("needs the OpenWrt package python3-decimal "
                 "(opkg install python3-decimal / apk add python3-decimal)")


class Decimal(float):
    """decimal.Decimal where python3-decimal is not installed: a float."""
    __slots__ = ()

    def __repr__(self) -> str:
        return f"Decimal('{float(self)!r}')"


class _Context:
    rounding = "ROUND_HALF_EVEN"
    prec = 28


def _decimal_stand_in():
    module = type(sys)("decimal", "Stand-in: decimal " + DECIMAL_NEEDS + ".")
    module.Decimal = Decimal
    module.DefaultContext = _Context()
    module.getcontext = lambda: module.DefaultContext
    for name in ("ROUND_HALF_EVEN", "ROUND_HALF_UP", "ROUND_HALF_DOWN", "ROUND_UP",
                 "ROUND_DOWN", "ROUND_CEILING", "ROUND_FLOOR", "ROUND_05UP"):
        setattr(module, name, name)
    return module


def install_decimal() -> bool:
    """The decimal stand-in, if decimal is missing; whether it was installed."""
    try:
        import decimal  # noqa: F401
        return False
    except ImportError:
        pass
    sys.modules["decimal"] = _decimal_stand_in()
    return True


install()
install_decimal()
