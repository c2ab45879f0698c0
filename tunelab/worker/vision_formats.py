"""Image + text rows: which columns hold images, and a row as chat messages with image parts.

The shapes people publish, all read into one form — messages whose content is a list of
`{"type": "image"}` / `{"type": "text", "text": ...}` parts, plus the row's image
references in the order the image parts appear:
  chatml    `messages` turns whose content is a list of parts, with an `images` column
            (or the path inside the part: `{"type": "image", "image": "a.png"}`)
  sharegpt  LLaVA-style `conversations` turns with `<image>` in the text and an `images`
            (or `image`) column; turns without any placeholder get the images at the start
            of the first user turn, as LLaVA's own data does
  alpaca    instruction/output columns plus an image column (images open the user turn)
  caption   an image column and a text column: the image is the user turn, the text the reply
An image reference is a path (relative ones are resolved by `vision_data` against the
dataset file's folder), or a dict with `bytes` and/or `path` (a hub image feature read
without decoding). Torch-free.
"""

from __future__ import annotations

from typing import Any

from tunelab.worker.formats import DataFormatError, _alpaca_messages, _map_role, conversation_column, image_column

IMAGE_PLACEHOLDER = "<image>"
# Keys under which a chat part may carry its own image reference.
INLINE_IMAGE_KEYS = ("image", "path", "url", "image_url")
WORKING_EXAMPLE = (
    '{"messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is shown?"}]}, '
    '{"role": "assistant", "content": [{"type": "text", "text": "A red circle."}]}], "images": ["images/0.png"]}'
)


def unknown_image_shape(columns: list[str]) -> DataFormatError:
    """The error for image data whose shape `detect_format` cannot name."""
    return DataFormatError(
        "format",
        f"the data has an image column but no text tunelab can pair with it; the columns are {list(columns)}. "
        "Use a caption table (map your columns, e.g. column_mapping: {image: file_name, text: caption}), "
        "LLaVA-style conversations with <image> placeholders and an images column, or chat messages with "
        f"image parts, e.g. {WORKING_EXAMPLE}",
    )


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _text_parts(text: str) -> list[dict[str, Any]]:
    """A string with `<image>` placeholders as parts (empty text around them is dropped)."""
    parts: list[dict[str, Any]] = []
    for i, piece in enumerate(text.split(IMAGE_PLACEHOLDER)):
        if i:
            parts.append({"type": "image"})
        if piece.strip():
            parts.append({"type": "text", "text": piece.strip("\n") if i else piece.rstrip("\n")})
    return parts


def _inline_ref(part: dict[str, Any]) -> Any:
    for key in INLINE_IMAGE_KEYS:
        value = part.get(key)
        if isinstance(value, dict):
            value = value.get("url") or value.get("path") or value
        if value:
            return value
    return None


def _content_parts(content: Any, inline_refs: list[Any]) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return _text_parts(content)
    if not isinstance(content, list):
        raise DataFormatError("format", f"a turn's content must be text or a list of parts, got {type(content).__name__}")
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("image", "image_url"):
            parts.append({"type": "image"})
            inline_refs.append(_inline_ref(part))
        elif kind == "text":
            parts.extend(_text_parts(str(part.get("text") or "")))
        else:
            raise DataFormatError("format", f"unknown content part {part!r}; parts are {{type: image}} or {{type: text, text: ...}}")
    return parts


def _turns(row: dict[str, Any], fmt: str, config: dict[str, Any], inline_refs: list[Any]) -> list[dict[str, Any]]:
    if fmt == "caption":
        return [{"role": "user", "content": []},
                {"role": "assistant", "content": _text_parts(str(row.get("text") or ""))}]
    if fmt == "alpaca":
        return [{"role": m["role"], "content": _text_parts(m["content"])} for m in _alpaca_messages(row)]
    column = conversation_column(list(row))
    turns = row.get(column) if column else None
    if not isinstance(turns, list):
        raise DataFormatError("format", f"a row has no conversation list (columns: {sorted(row)})")
    role_key, content_key = ("from", "value") if fmt == "sharegpt" else ("role", "content")
    role_mapping = config.get("role_mapping") or {}
    messages = []
    for turn in turns:
        if not isinstance(turn, dict) or turn.get(role_key) is None:
            raise DataFormatError("format", f"a {fmt} turn needs '{role_key}' and '{content_key}' keys, got {turn!r}")
        role = _map_role(str(turn[role_key]), fmt, role_mapping)
        messages.append({"role": role, "content": _content_parts(turn.get(content_key), inline_refs)})
    return messages


def vision_messages(row: dict[str, Any], fmt: str, config: dict[str, Any]) -> tuple[list[dict[str, Any]], list[Any]]:
    """The row as chat messages with image parts, and its image references in part order."""
    inline: list[Any] = []
    messages = _turns(row, fmt, config, inline)
    column = image_column(list(row))
    refs = _as_list(row.get(column)) if column else [r for r in inline if r is not None]
    placed = sum(1 for m in messages for p in m["content"] if p["type"] == "image")
    if placed == 0 and refs:
        # No placeholder anywhere: the images open the first user turn.
        first_user = next((m for m in messages if m["role"] == "user"), None)
        if first_user is None:
            raise DataFormatError("format", "a row has images but no user turn to put them in; add a user turn")
        first_user["content"] = [{"type": "image"} for _ in refs] + first_user["content"]
        placed = len(refs)
    if placed != len(refs):
        raise DataFormatError(
            "format",
            f"a row has {placed} image placeholder(s) but {len(refs)} image(s) in its "
            f"'{column or 'content parts'}' column; give one image per <image> placeholder / image part",
        )
    return messages, refs
