"""Images and audio clips in OpenAI chat requests, checked in the server before any model
sees them: each bad part is a 400 naming its place in the request, an http(s) URL is never
fetched, sizes are bounded, and media go only to a run whose model reads them."""

from __future__ import annotations

import base64
import io
import wave
from pathlib import Path

import pytest

from tunelab.inference.media_input import MAX_MEDIA_ENV, MAX_MEDIA_PARTS, media_kinds
from tunelab.inference.target import ModelTarget
from tunelab.server.openai_schemas import ChatRequest, OpenAIError, parse
from tunelab.server.routes_inference import _check_media

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))


def png_uri(data: bytes = PNG) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def wav_b64() -> str:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1), out.setsampwidth(2), out.setframerate(16000)
        out.writeframes(b"\x00\x00" * 1600)
    return base64.b64encode(buffer.getvalue()).decode()


def child_messages(*content: dict) -> list[dict]:
    body = {"model": "run-1", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": list(content)}]}
    return parse(ChatRequest, body).child_messages()


def refused(*content: dict) -> OpenAIError:
    with pytest.raises(OpenAIError) as caught:
        child_messages(*content)
    assert caught.value.status == 400
    return caught.value


def test_an_image_part_reaches_the_child_as_its_bytes_beside_the_text():
    messages = child_messages({"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": png_uri()}})
    assert messages[0] == {"role": "system", "content": "Be brief."}
    text, image = messages[1]["content"]
    assert text == {"type": "text", "text": "What is this?"}
    assert image["type"] == "image" and base64.b64decode(image["data"]) == PNG
    assert media_kinds(messages) == {"image"}
    # Text-only parts stay one string, as a plain chat message.
    assert child_messages({"type": "text", "text": "a"}, {"type": "text", "text": "b"})[1]["content"] == "ab"


def test_an_audio_part_reaches_the_child_as_its_clip():
    clip = wav_b64()
    messages = child_messages({"type": "input_audio", "input_audio": {"data": clip, "format": "wav"}})
    assert messages[1]["content"] == [{"type": "audio", "data": clip}]
    assert media_kinds(messages) == {"audio"}
    error = refused({"type": "input_audio", "input_audio": {"data": clip, "format": "aiff"}})
    assert error.param == "messages.1.content.0.input_audio.format" and "wav" in str(error)


@pytest.mark.parametrize("url, says", [
    ("https://example.com/cat.png", "does not fetch image URLs"),
    ("http://127.0.0.1:8080/admin", "does not fetch image URLs"),
    ("data:text/plain;base64,aGVsbG8=", "not an image"),
    ("data:image/png;base64,not base64!", "not valid base64"),
    ("data:image/png,rawbytes", "must be base64"),
    ("data:image/png;base64," + base64.b64encode(b"hello, not a picture").decode(), "not a PNG, JPEG"),
    ("file:///etc/passwd", "data: URI"),
])
def test_a_bad_image_is_refused_naming_its_part(url, says):
    error = refused({"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": url}})
    assert error.param == "messages.1.content.1.image_url.url"
    assert says in str(error)


def test_an_unknown_part_type_says_which_parts_there_are():
    error = refused({"type": "video_url", "video_url": {"url": "x"}})
    assert error.param == "messages.1.content" and "image_url" in str(error) and "'video_url'" in str(error)


def test_media_are_bounded_per_part_in_total_and_in_number(monkeypatch):
    monkeypatch.setenv(MAX_MEDIA_ENV, "1000")
    error = refused({"type": "image_url", "image_url": {"url": png_uri(PNG + bytes(2000))}})
    assert error.param == "messages.1.content.0.image_url.url" and "larger than 1000 bytes" in str(error)
    each = {"type": "image_url", "image_url": {"url": png_uri(PNG + bytes(500))}}
    error = refused(each, each)
    assert error.param == "messages" and MAX_MEDIA_ENV in str(error)
    monkeypatch.delenv(MAX_MEDIA_ENV)
    error = refused(*[{"type": "image_url", "image_url": {"url": png_uri()}}] * (MAX_MEDIA_PARTS + 1))
    assert error.param == "messages" and f"at most {MAX_MEDIA_PARTS}" in str(error)


def _target(modality: str) -> ModelTarget:
    return ModelTarget(run_id=7, step=None, kind="adapter", weights=Path("/nowhere"), base_model="m",
                       trust_remote_code=False, modality=modality)


def test_media_go_only_to_a_run_whose_model_reads_them():
    image = child_messages({"type": "image_url", "image_url": {"url": png_uri()}})
    audio = child_messages({"type": "input_audio", "input_audio": {"data": wav_b64(), "format": "wav"}})
    _check_media(_target("vision"), image)
    _check_media(_target("audio_chat"), audio)
    for modality, messages, says in (("text", image, "a text model, which cannot take image input"),
                                     ("audio_chat", image, "cannot take image input"),
                                     ("vision", audio, "cannot take audio input")):
        with pytest.raises(OpenAIError) as caught:
            _check_media(_target(modality), messages)
        assert caught.value.status == 400 and caught.value.param == "messages" and says in str(caught.value)
