"""The plain-text field types of a run's config: names, paths and secrets.

Every name, path, hub id or token a user gives is checked here before anything touches
the filesystem: no control or bidi-override characters (which make a message or a
listing lie about what it shows), and lengths the OS accepts. Messages never quote a
secret's value.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, SecretStr

from tunelab.text import char_name, first_unsafe_char, printable

# Lengths checked before any filesystem call: longer names make the OS raise
# ENAMETOOLONG from a mere exists(), far from where the name was given.
NAME_MAX_CHARS = 256
PATH_MAX_CHARS = 4096
PATH_PART_MAX_BYTES = 255
DISPLAY_NAME_MAX_CHARS = 200


def _safe_chars(text: str) -> None:
    found = first_unsafe_char(text)
    if found is not None:
        pos, ch = found
        raise ValueError(f"contains {char_name(ch)}, a control or bidi-override character, at position {pos}; "
                         "remove it: names and paths must be plain text")


def _name(text: str) -> str:
    """A short name: hub id part, split, role, column, project, ..."""
    _safe_chars(text)
    if len(text) > NAME_MAX_CHARS:
        raise ValueError(f"is {len(text)} characters long; a name may have at most {NAME_MAX_CHARS}")
    return text


def check_path_text(text: str) -> str:
    """A file path, hub id or URI: at most PATH_MAX_CHARS, each part at most 255 bytes."""
    _safe_chars(text)
    if len(text) > PATH_MAX_CHARS:
        raise ValueError(f"is {len(text)} characters long; a path may have at most {PATH_MAX_CHARS}")
    for part in text.split("/"):
        size = len(part.encode("utf-8", "surrogatepass"))
        if size > PATH_PART_MAX_BYTES:
            raise ValueError(f"has a part of {size} bytes ('{printable(part, 40)}'); each folder or file name "
                             f"may have at most {PATH_PART_MAX_BYTES} bytes")
    return text


def _secret(value: SecretStr) -> SecretStr:
    """A token or key: plain text of sane length. Messages never quote the value."""
    text = value.get_secret_value()
    _safe_chars(text)
    if len(text) > PATH_MAX_CHARS:
        raise ValueError(f"is {len(text)} characters long; a token or key may have at most {PATH_MAX_CHARS}")
    return value


Name = Annotated[str, AfterValidator(_name)]
PathText = Annotated[str, AfterValidator(check_path_text)]
DisplayName = Annotated[str, Field(max_length=DISPLAY_NAME_MAX_CHARS), AfterValidator(_name)]
Secret = Annotated[SecretStr, AfterValidator(_secret)]
