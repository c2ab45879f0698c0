"""Audio chat rows in every shape read into one form: messages with {type: audio} parts and
the clip references in part order; a count that does not add up, or a part of another kind,
is an error that says what was expected. Pure data, no model."""

from __future__ import annotations

import pytest

from typed_config import typed
from tunelab.worker.families.audio_chat.formats import audio_messages, has_audio
from tunelab.worker.data.formats import DataFormatError, detect_format

QUESTION = {"type": "text", "text": "What is said?"}
REPLY = {"role": "assistant", "content": [{"type": "text", "text": "seven three"}]}
AUDIO_THEN_QUESTION = [{"type": "audio"}, {"type": "text", "text": "What is said?"}]


def _shape(row: dict) -> tuple[str, list, list]:
    fmt = detect_format(list(row), [row])
    messages, refs = audio_messages(row, fmt, typed({}))
    return fmt, messages, refs


def test_chat_parts_carry_their_own_clips():
    row = {"messages": [{"role": "user", "content": [{"type": "audio", "path": "clips/a.wav", "text": None}, QUESTION]}, REPLY]}
    fmt, messages, refs = _shape(row)
    assert fmt == "chatml" and refs == ["clips/a.wav"]
    assert messages[0]["content"] == AUDIO_THEN_QUESTION
    assert messages[1]["content"] == [{"type": "text", "text": "seven three"}]
    assert has_audio(fmt, list(row), [row])


def test_an_audios_column_gives_the_clips_in_part_order():
    row = {"messages": [{"role": "user", "content": [{"type": "audio"}, {"type": "audio"}, QUESTION]}, REPLY],
           "audios": ["one.wav", "two.flac"]}
    fmt, messages, refs = _shape(row)
    assert fmt == "chatml" and refs == ["one.wav", "two.flac"]
    assert [p["type"] for p in messages[0]["content"]] == ["audio", "audio", "text"]


def test_sharegpt_placeholders_and_a_clip_without_one():
    row = {"conversations": [{"from": "human", "value": "<audio>\nWhat is said?"}, {"from": "gpt", "value": "seven three"}],
           "audios": ["a.wav"]}
    fmt, messages, refs = _shape(row)
    assert fmt == "sharegpt" and refs == ["a.wav"] and messages[0]["content"] == AUDIO_THEN_QUESTION
    # No placeholder anywhere: the clip opens the first user turn.
    row["conversations"][0]["value"] = "What is said?"
    assert _shape(row)[1][0]["content"] == AUDIO_THEN_QUESTION


def test_a_transcription_table_is_the_clip_then_its_transcript():
    row = {"audio": "clips/a.wav", "text": "seven three"}
    fmt, messages, refs = _shape(row)
    assert fmt == "transcription" and refs == ["clips/a.wav"]
    assert messages == [{"role": "user", "content": [{"type": "audio"}]}, REPLY]


def test_text_only_chat_has_no_audio():
    row = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    assert not has_audio("chatml", list(row), [row])
    assert not has_audio("alpaca", ["instruction", "output"], [])


def test_clip_count_that_does_not_match_the_parts_says_so():
    row = {"messages": [{"role": "user", "content": [{"type": "audio"}, QUESTION]}, REPLY], "audios": ["a.wav", "b.wav"]}
    with pytest.raises(DataFormatError, match=r"1 audio part\(s\).*but 2 clip\(s\) in its 'audios'") as caught:
        _shape(row)
    assert caught.value.field == "format"


def test_an_image_part_names_the_parts_an_audio_chat_model_reads():
    row = {"messages": [{"role": "user", "content": [{"type": "image"}, QUESTION]}, REPLY]}
    with pytest.raises(DataFormatError, match=r"unknown content part .*type: audio, path"):
        _shape(row)
