"""Chat rows with media parts (images, audio clips): the reading both media formats share.

`vision_formats` and `audio_chat_formats` read the same shapes — chat turns whose content
is a string with placeholders (`<image>`, `<audio>`) or a list of typed parts, plus the
row's media references in the order the media parts appear. What differs per medium
(placeholder, part types, inline keys, how a hub feature dict is kept) lives in a
`MediaParts`; the walking of turns and parts lives here once. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tunelab.worker.data.rows import DataFormatError, _map_role, conversation_column

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


def as_list(value: Any) -> list[Any]:
    """A column value as a list of references (one bare reference becomes a list of one)."""
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


@dataclass(frozen=True)
class MediaParts:
    kind: str                      # the part type written out: "image" / "audio"
    placeholder: str               # the text marker: "<image>" / "<audio>"
    part_types: tuple[str, ...]    # part types read as this medium
    inline_keys: tuple[str, ...]   # keys under which a part may carry its own reference
    keep_bytes_dicts: bool         # a hub feature dict with bytes stays whole (audio decodes the bytes)
    unknown_part_hint: str         # the end of the error for a part of another type

    def text_parts(self, text: str) -> list[dict[str, Any]]:
        """A string with placeholders as parts (empty text around them is dropped)."""
        parts: list[dict[str, Any]] = []
        for i, piece in enumerate(text.split(self.placeholder)):
            if i:
                parts.append({"type": self.kind})
            if piece.strip():
                parts.append({"type": "text", "text": piece.strip("\n") if i else piece.rstrip("\n")})
        return parts

    def inline_ref(self, part: dict[str, Any]) -> Any:
        for key in self.inline_keys:
            value = part.get(key)
            if isinstance(value, dict) and not (self.keep_bytes_dicts and value.get("bytes")):
                value = value.get("url") or value.get("path") or value
            if value:
                return value
        return None

    def content_parts(self, content: Any, inline_refs: list[Any], where: str = "content",
                      places: list[str] | None = None) -> list[dict[str, Any]]:
        """A turn's content as parts; each media part's own reference goes to `inline_refs`
        and, with `places`, where it sits (`where[i]`) goes there, for messages naming it."""
        if content is None:
            return []
        if isinstance(content, str):
            return self.text_parts(content)
        if not isinstance(content, list):
            raise DataFormatError("format", f"a turn's content must be text or a list of parts, got {type(content).__name__}")
        parts: list[dict[str, Any]] = []
        for index, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in self.part_types:
                parts.append({"type": self.kind})
                inline_refs.append(self.inline_ref(part))
                if places is not None:
                    places.append(f"{where}[{index}] ({kind} part)")
            elif kind == "text":
                parts.extend(self.text_parts(str(part.get("text") or "")))
            else:
                raise DataFormatError("format", f"unknown content part {part!r}{self.unknown_part_hint}")
        return parts

    def chat_turns(self, row: dict[str, Any], fmt: str, config: WorkerConfig, inline_refs: list[Any],
                   places: list[str] | None = None) -> list[dict[str, Any]]:
        """A chatml / sharegpt row's turns as messages with parts; inline references go to
        `inline_refs` (and where each sits, e.g. `messages[0].content[1] (image_url part)`, to `places`)."""
        column = conversation_column(list(row))
        turns = row.get(column) if column else None
        if not isinstance(turns, list):
            raise DataFormatError("format", f"a row has no conversation list (columns: {sorted(row)})")
        role_key, content_key = ("from", "value") if fmt == "sharegpt" else ("role", "content")
        role_mapping = config.role_mapping
        messages = []
        for number, turn in enumerate(turns):
            if not isinstance(turn, dict) or turn.get(role_key) is None:
                raise DataFormatError("format", f"a {fmt} turn needs '{role_key}' and '{content_key}' keys, got {turn!r}")
            role = _map_role(str(turn[role_key]), fmt, role_mapping)
            content = self.content_parts(turn.get(content_key), inline_refs, f"{column}[{number}].{content_key}", places)
            messages.append({"role": role, "content": content})
        return messages

    def place(self, messages: list[dict[str, Any]], refs: list[Any], no_user_turn: str) -> int:
        """How many media parts the messages hold; with none, the references open the first user turn."""
        placed = sum(1 for m in messages for p in m["content"] if p["type"] == self.kind)
        if placed == 0 and refs:
            # No placeholder or part anywhere: the media open the first user turn.
            first_user = next((m for m in messages if m["role"] == "user"), None)
            if first_user is None:
                raise DataFormatError("format", no_user_turn)
            first_user["content"] = [{"type": self.kind} for _ in refs] + first_user["content"]
            placed = len(refs)
        return placed
