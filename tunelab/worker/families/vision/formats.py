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
  OpenAI    chat messages whose parts are `{"type": "image_url", "image_url": {"url": ...}}`
            beside `{"type": "text", "text": ...}`, the image inside the part (no images column)
An image reference is a path (relative ones are resolved against the dataset file's
folder), the image's bytes, a dict with `bytes` and/or `path` (a hub image feature read
without decoding), a `data:` URI or an http(s) URL (`image_sources` resolves them all).
Each reference comes with where it sits (`the 'images' column, item 0`,
`messages[0].content[1] (image_url part)`), so a message about it names the part; an
image part that holds no reference, in a row without an images column, is an error
naming that part. `first_image_part` finds image parts in a dataset, so neither a vision
model nor a text model trains on such rows as text. Torch-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from tunelab.worker.data.rows import DataFormatError, _alpaca_messages, conversation_column, image_column
from tunelab.worker.data.media_parts import MediaParts, as_list

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

IMAGE_PLACEHOLDER = "<image>"
# Keys under which a chat part may carry its own image reference.
INLINE_IMAGE_KEYS = ("image", "path", "url", "image_url")
IMAGE_PART_TYPES = ("image", "image_url")
# Rows per batch when a dataset is searched for image parts.
SCAN_BATCH_ROWS = 1000
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
    kind="image", placeholder=IMAGE_PLACEHOLDER, part_types=IMAGE_PART_TYPES, inline_keys=INLINE_IMAGE_KEYS,
    # A part holding a hub image dict with bytes keeps it whole: the bytes are the image.
    keep_bytes_dicts=True, unknown_part_hint="; parts are {type: image}, {type: image_url, image_url: {url: ...}} or {type: text, text: ...}",
)


def _turns(row: dict[str, Any], fmt: str, config: WorkerConfig, inline_refs: list[Any], places: list[str]) -> list[dict[str, Any]]:
    if fmt == "caption":
        return [{"role": "user", "content": []},
                {"role": "assistant", "content": IMAGES.text_parts(str(row.get("text") or ""))}]
    if fmt == "alpaca":
        return [{"role": m["role"], "content": IMAGES.text_parts(m["content"])} for m in _alpaca_messages(row)]
    return IMAGES.chat_turns(row, fmt, config, inline_refs, places)


def vision_messages(row: dict[str, Any], fmt: str, config: WorkerConfig) -> tuple[list[dict[str, Any]], list[Any], list[str]]:
    """The row as chat messages with image parts, its image references in part order, and
    where each reference sits in the row."""
    inline: list[Any] = []
    inline_places: list[str] = []
    messages = _turns(row, fmt, config, inline, inline_places)
    column = image_column(list(row))
    if column and not as_list(row.get(column)) and inline:
        column = None  # a table whose other rows use the column: this row's images are in its parts
    if column:
        refs = as_list(row.get(column))
        listed = isinstance(row.get(column), (list, tuple))
        places = [f"the '{column}' column, item {i}" if listed else f"the '{column}' column" for i in range(len(refs))]
    else:
        empty = next((place for ref, place in zip(inline, inline_places) if not _holds_image(ref)), None)
        if empty is not None:
            raise DataFormatError("format", f"{empty} holds no image; give it one ({{type: image_url, image_url: {{url: ...}}}} "
                                            "with a data: URI, an http(s) URL or a path) or list the row's images in an images column")
        refs, places = inline, inline_places
    placed = IMAGES.place(messages, refs, "a row has images but no user turn to put them in; add a user turn")
    if placed != len(refs):
        raise DataFormatError(
            "format",
            f"a row has {placed} image placeholder(s) but {len(refs)} image(s) in its "
            f"'{column or 'content parts'}' column; give one image per <image> placeholder / image part",
        )
    return messages, refs, places


def _holds_image(ref: Any) -> bool:
    """Whether a part's own reference names an image at all (a table gives parts without
    one null keys, so `{"url": None}` is as empty as a missing key)."""
    if isinstance(ref, dict):
        return any(ref.get(key) for key in ("bytes", "path", "url"))
    return bool(ref)


def _may_hold_parts(feature: Any) -> bool:
    """Whether a column's features may hold typed parts (a dict with a `type` key): false
    only where every leaf is a plain value. A turn whose content is text in one row and
    parts in another loads as an opaque JSON feature, which may."""
    if isinstance(feature, dict):
        return "type" in feature or any(_may_hold_parts(inner) for inner in feature.values())
    if isinstance(feature, (list, tuple)):
        return any(_may_hold_parts(inner) for inner in feature)
    inner = getattr(feature, "feature", None)
    if inner is not None:
        return _may_hold_parts(inner)
    return getattr(feature, "_type", None) not in ("Value", "ClassLabel")


class ImagePart(NamedTuple):
    """Where a dataset first holds an image: its row, the turn's content (`messages[0].content[1]`)
    and what is there (`image_url part`, `an <image> placeholder`)."""
    row: int
    where: str
    what: str

    @property
    def place(self) -> str:
        return f"{self.where} ({self.what})"


def _image_part_in(turns: Any, placeholders: bool) -> tuple[str, str] | None:
    """(where, what) of the first image part (or, with `placeholders`, `<image>` in a turn's text)."""
    for number, turn in enumerate(turns if isinstance(turns, list) else []):
        if not isinstance(turn, dict):
            continue
        key = "content" if "content" in turn else "value"
        content = turn.get(key)
        if placeholders and isinstance(content, str) and IMAGE_PLACEHOLDER in content:
            return f"[{number}].{key}", f"an {IMAGE_PLACEHOLDER} placeholder"
        for index, part in enumerate(content if isinstance(content, list) else []):
            if isinstance(part, dict) and part.get("type") in IMAGE_PART_TYPES:
                return f"[{number}].{key}[{index}]", f"{part['type']} part"
    return None


def first_image_part(rows: Any, placeholders: bool = False) -> ImagePart | None:
    """The first image part in a dataset's conversations (with `placeholders`, or `<image>`
    in a turn's text), or None. Read a batch of rows at a time, and only where the column's
    features may hold typed parts (or, with `placeholders`, text)."""
    column = conversation_column(list(rows.column_names or []))
    features = getattr(rows, "features", None)
    if column is None or (features is not None and not placeholders and not _may_hold_parts(features.get(column))):
        return None
    turns_only = rows.select_columns([column])  # no other column (an image feature) is read
    for start in range(0, len(turns_only), SCAN_BATCH_ROWS):
        for offset, turns in enumerate(turns_only[start:start + SCAN_BATCH_ROWS][column]):
            found = _image_part_in(turns, placeholders)
            if found is not None:
                return ImagePart(start + offset, column + found[0], found[1])
    return None
