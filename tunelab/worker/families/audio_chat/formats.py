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

from typing import TYPE_CHECKING, Any

from tunelab.worker.data.formats import DataFormatError, conversation_column
from tunelab.worker.data.media_parts import MediaParts, as_list
from tunelab.worker.families.speech.formats import TRANSCRIPTION, audio_column, transcript_column

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

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


AUDIO = MediaParts(
    kind="audio", placeholder=AUDIO_PLACEHOLDER, part_types=AUDIO_PART_TYPES, inline_keys=INLINE_AUDIO_KEYS,
    # A hub audio feature carrying bytes stays whole: `audio_chat_data` decodes the bytes.
    keep_bytes_dicts=True,
    unknown_part_hint=(" for an audio chat model; parts are {type: audio, path: ...} or {type: text, text: ...}, "
                       f"e.g. {WORKING_EXAMPLE}"),
)


def _turns(row: dict[str, Any], fmt: str, config: WorkerConfig, inline_refs: list[Any]) -> list[dict[str, Any]]:
    if fmt == TRANSCRIPTION:
        text = row.get(transcript_column(list(row)) or "text")
        return [{"role": "user", "content": []}, {"role": "assistant", "content": AUDIO.text_parts(str(text or ""))}]
    return AUDIO.chat_turns(row, fmt, config, inline_refs)


def audio_messages(row: dict[str, Any], fmt: str, config: WorkerConfig) -> tuple[list[dict[str, Any]], list[Any]]:
    """The row as chat messages with audio parts, and its clip references in part order."""
    inline: list[Any] = []
    messages = _turns(row, fmt, config, inline)
    column = audio_column(list(row)) if fmt == TRANSCRIPTION else audio_list_column(list(row))
    refs = as_list(row.get(column)) if column else [r for r in inline if r is not None]
    placed = AUDIO.place(messages, refs, "a row has audio but no user turn to put it in; add a user turn")
    if placed != len(refs):
        raise DataFormatError(
            "format",
            f"a row has {placed} audio part(s) / <audio> placeholder(s) but {len(refs)} clip(s) in its "
            f"'{column or 'content parts'}' {'column' if column else ''}; give one clip per audio part "
            f"(inside the part, e.g. {{type: audio, path: clips/0.wav}}, or in an audios column)",
        )
    return messages, refs
