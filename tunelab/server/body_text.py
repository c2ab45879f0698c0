"""Text in a JSON request body that is not Unicode: a lone UTF-16 surrogate.

JSON may spell a character as an escape, and `"\\ud800"` (half of a surrogate pair, with
its other half missing) parses into a Python string that no UTF-8 encoder accepts: a
file name, a tokenizer, the database or a child process's pipe then fails far from the
request, and a chat answered 500. The request guard refuses such a body once, for every
route and every field, before any route reads it (`lone_surrogate`): a 400 naming the
field. Only a body that spells a surrogate escape at all is parsed here; valid pairs
(an emoji written as two escapes) pass.
"""

from __future__ import annotations

import json
import re
from typing import Any

# A \uD800-\uDFFF escape anywhere (it may be a literal "\\u..." too; parsing tells).
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def lone_surrogate(body: bytes) -> tuple[str, int] | None:
    """(field path such as `messages.0.content`, character position) of the first string in
    a JSON body holding a lone surrogate, or None. A body that is not JSON is None: the
    route's own parsing answers it."""
    if not SURROGATE_ESCAPE.search(body):
        return None
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return _first_in(value, "")


def _first_in(value: Any, where: str) -> tuple[str, int] | None:
    if isinstance(value, str):
        position = _bad_position(value)
        return (where or "body", position) if position is not None else None
    if isinstance(value, dict):
        for key, item in value.items():
            field = f"{where}.{key}" if where else str(key)
            if _bad_position(key) is not None:
                return (where or "body", 0)  # a key itself: the field is its parent
            found = _first_in(item, field)
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _first_in(item, f"{where}.{index}" if where else str(index))
            if found:
                return found
    return None


def _bad_position(text: str) -> int | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None
