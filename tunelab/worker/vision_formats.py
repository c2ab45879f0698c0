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

from tunelab.worker.formats import DataFormatError, _alpaca_messages, image_column
from tunelab.worker.media_parts import MediaParts, as_list

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


IMAGES = MediaParts(
    kind="image", placeholder=IMAGE_PLACEHOLDER, part_types=("image", "image_url"), inline_keys=INLINE_IMAGE_KEYS,
    keep_bytes_dicts=False, unknown_part_hint="; parts are {type: image} or {type: text, text: ...}",
)


def _turns(row: dict[str, Any], fmt: str, config: dict[str, Any], inline_refs: list[Any]) -> list[dict[str, Any]]:
    if fmt == "caption":
        return [{"role": "user", "content": []},
                {"role": "assistant", "content": IMAGES.text_parts(str(row.get("text") or ""))}]
    if fmt == "alpaca":
        return [{"role": m["role"], "content": IMAGES.text_parts(m["content"])} for m in _alpaca_messages(row)]
    return IMAGES.chat_turns(row, fmt, config, inline_refs)


def vision_messages(row: dict[str, Any], fmt: str, config: dict[str, Any]) -> tuple[list[dict[str, Any]], list[Any]]:
    """The row as chat messages with image parts, and its image references in part order."""
    inline: list[Any] = []
    messages = _turns(row, fmt, config, inline)
    column = image_column(list(row))
    refs = as_list(row.get(column)) if column else [r for r in inline if r is not None]
    placed = IMAGES.place(messages, refs, "a row has images but no user turn to put them in; add a user turn")
    if placed != len(refs):
        raise DataFormatError(
            "format",
            f"a row has {placed} image placeholder(s) but {len(refs)} image(s) in its "
            f"'{column or 'content parts'}' column; give one image per <image> placeholder / image part",
        )
    return messages, refs
