"""Audio chat rows: a row as chat messages with audio parts, and its clip references.

The shapes read, all into one form — messages whose content is a list of
`{"type": "audio"}` / `{"type": "text", "text": ...}` parts, plus the row's clip references
in the order the audio parts appear (as `vision_formats` does for images):
  chatml    `messages` turns whose content is a list of parts, the clip inside the part
            (`{"type": "audio", "path": "clips/0.wav"}`, or under `audio` / `audio_url` / `url`)
            or in an `audios` (or `audio`) column, one per audio part
  sharegpt  `conversations` turns with `<audio>` in the text and an `audios` (or `audio`)
            column; turns without any placeholder get the clips at the start of the first
            user turn
  transcription  an audio column and a transcript column: the clip is the user turn, the
            transcript the reply
A clip reference is a path (relative ones are resolved by `audio_chat_data` against the
dataset file's folder) or a dict with `bytes` and/or `path` (a hub audio feature read
without decoding). Torch-free.
"""

from __future__ import annotations

from typing import Any

from tunelab.worker.formats import DataFormatError, _map_role, conversation_column
from tunelab.worker.speech_formats import TRANSCRIPTION, audio_column, transcript_column

AUDIO_PLACEHOLDER = "<audio>"
# Keys under which a chat part may carry its own clip reference.
INLINE_AUDIO_KEYS = ("audio", "path", "audio_url", "url")
# Columns holding a row's clips, one per audio part, in part order.
AUDIO_LIST_COLUMNS = ("audios", "audio")
AUDIO_PART_TYPES = ("audio", "audio_url", "input_audio")
CHAT_FORMATS = ("chatml", "sharegpt")
WORKING_EXAMPLE = (
    '{"messages": [{"role": "user", "content": [{"type": "audio", "path": "clips/0001.wav"}, '
    '{"type": "text", "text": "What is said?"}]}, {"role": "assistant", "content": [{"type": "text", "text": "seven three"}]}]}'
)


def audio_list_column(columns: list[str]) -> str | None:
    return next((c for c in AUDIO_LIST_COLUMNS if c in columns), None)


def _has_audio_part(row: dict[str, Any]) -> bool:
    column = conversation_column(list(row))
    for turn in (row.get(column) if column else None) or []:
        content = turn.get("content") if isinstance(turn, dict) else None
        if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") in AUDIO_PART_TYPES for p in content):
            return True
    return False


def has_audio(fmt: str, columns: list[str], sample_rows: list[dict[str, Any]]) -> bool:
    """Whether data of this format and these columns holds audio an audio chat model listens to."""
    if fmt == TRANSCRIPTION:
        return True
    if fmt not in CHAT_FORMATS:
        return False
    return audio_list_column(columns) is not None or any(_has_audio_part(row) for row in sample_rows)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _text_parts(text: str) -> list[dict[str, Any]]:
    """A string with `<audio>` placeholders as parts (empty text around them is dropped)."""
    parts: list[dict[str, Any]] = []
    for i, piece in enumerate(text.split(AUDIO_PLACEHOLDER)):
        if i:
            parts.append({"type": "audio"})
        if piece.strip():
            parts.append({"type": "text", "text": piece.strip("\n") if i else piece.rstrip("\n")})
    return parts


def _inline_ref(part: dict[str, Any]) -> Any:
    for key in INLINE_AUDIO_KEYS:
        value = part.get(key)
        if isinstance(value, dict) and not value.get("bytes"):
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
        if kind in AUDIO_PART_TYPES:
            parts.append({"type": "audio"})
            inline_refs.append(_inline_ref(part))
        elif kind == "text":
            parts.extend(_text_parts(str(part.get("text") or "")))
        else:
            raise DataFormatError("format", f"unknown content part {part!r} for an audio chat model; parts are "
                                            f"{{type: audio, path: ...}} or {{type: text, text: ...}}, e.g. {WORKING_EXAMPLE}")
    return parts


def _turns(row: dict[str, Any], fmt: str, config: dict[str, Any], inline_refs: list[Any]) -> list[dict[str, Any]]:
    if fmt == TRANSCRIPTION:
        text = row.get(transcript_column(list(row)) or "text")
        return [{"role": "user", "content": []}, {"role": "assistant", "content": _text_parts(str(text or ""))}]
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


def audio_messages(row: dict[str, Any], fmt: str, config: dict[str, Any]) -> tuple[list[dict[str, Any]], list[Any]]:
    """The row as chat messages with audio parts, and its clip references in part order."""
    inline: list[Any] = []
    messages = _turns(row, fmt, config, inline)
    column = audio_column(list(row)) if fmt == TRANSCRIPTION else audio_list_column(list(row))
    refs = _as_list(row.get(column)) if column else [r for r in inline if r is not None]
    placed = sum(1 for m in messages for p in m["content"] if p["type"] == "audio")
    if placed == 0 and refs:
        # No audio part anywhere: the clips open the first user turn.
        first_user = next((m for m in messages if m["role"] == "user"), None)
        if first_user is None:
            raise DataFormatError("format", "a row has audio but no user turn to put it in; add a user turn")
        first_user["content"] = [{"type": "audio"} for _ in refs] + first_user["content"]
        placed = len(refs)
    if placed != len(refs):
        raise DataFormatError(
            "format",
            f"a row has {placed} audio part(s) / <audio> placeholder(s) but {len(refs)} clip(s) in its "
            f"'{column or 'content parts'}' {'column' if column else ''}; give one clip per audio part "
            f"(inside the part, e.g. {{type: audio, path: clips/0.wav}}, or in an audios column)",
        )
    return messages, refs
