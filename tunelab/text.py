"""Which characters a name or path may not hold, and how to show stored text safely.

Control characters (C0, DEL, C1 such as ESC, BEL and the one-byte CSI U+009B) steer a
terminal: a name holding them can retitle the window or clear the screen when printed.
Bidi overrides and isolates (U+202A–U+202E, U+2066–U+2069) make text display in another
order than it is stored, so a path can read as something it is not. Lone surrogates
cannot be stored as UTF-8 at all. `config/run_config.py` refuses all of them on input; `printable`
shows text that was stored before that rule (old rows) with them escaped.
"""

from __future__ import annotations

BIDI_CONTROLS = frozenset(range(0x202A, 0x202F)) | frozenset(range(0x2066, 0x206A))


def is_unsafe_char(ch: str) -> bool:
    code = ord(ch)
    return code < 0x20 or 0x7F <= code <= 0x9F or code in BIDI_CONTROLS or 0xD800 <= code <= 0xDFFF


def first_unsafe_char(text: str) -> tuple[int, str] | None:
    """(position, character) of the first character `is_unsafe_char` refuses, if any."""
    return next(((i, ch) for i, ch in enumerate(text) if is_unsafe_char(ch)), None)


def char_name(ch: str) -> str:
    return f"U+{ord(ch):04X}"


def printable(value: object, limit: int | None = None, keep_lines: bool = False) -> str:
    """`value` as text with every unsafe character written as an escape (`\\x1b`,
    `\\u202e`), shortened to `limit` characters with a trailing '…'. `keep_lines` lets
    line breaks through (a multi-line error message)."""
    text = "" if value is None else str(value)
    if keep_lines:
        return "\n".join(printable(line, limit) for line in text.split("\n"))
    if first_unsafe_char(text) is not None:
        text = "".join(ascii(ch)[1:-1] if is_unsafe_char(ch) else ch for ch in text)
    if limit is not None and len(text) > limit:
        text = text[: max(0, limit - 1)] + "…"
    return text
