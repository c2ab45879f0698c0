"""Images and audio clips sent with a chat request, checked before they reach the model.

OpenAI's content parts carry them inline: `{"type": "image_url", "image_url": {"url":
"data:image/png;base64,..."}}` and `{"type": "input_audio", "input_audio": {"data":
"<base64>", "format": "wav"}}`. Each is decoded here, once, in the server (torch-free),
and refused with a message naming the part when it is not base64, not the kind of data
the part says, or larger than `max_media_bytes()`. The inference child gets the checked
parts as `{"type": "image" | "audio", "data": "<base64>"}`, its own small form.

An http(s) image URL is never fetched: the server reaching out to an address a client
names would let any client probe the server's network (server-side request forgery),
and the request waits on a third party. The client sends the picture inline instead.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from typing import Any

# Most bytes of images and clips (decoded) one request may carry, in one part or all together;
# the request body may be that much, a third larger as base64, beyond the usual limit.
MAX_MEDIA_ENV = "TUNELAB_INFERENCE_MAX_MEDIA_BYTES"
DEFAULT_MAX_MEDIA_BYTES = 8 * 1024 * 1024
# Largest number of media parts one request may carry.
MAX_MEDIA_PARTS = 8
DATA_URI = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(?:;[\w.+-]+=[\w.+-]+)*)(?P<b64>;base64)?,(?P<data>.*)", re.S)
# The leading bytes of the image formats PIL reads that a browser or client sends.
IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM")
AUDIO_FORMATS = ("wav", "mp3", "flac", "ogg")


class MediaInputError(ValueError):
    """A media part that cannot be used; `field` is its place in the request."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


def max_media_bytes() -> int:
    try:
        value = int(os.environ.get(MAX_MEDIA_ENV, DEFAULT_MAX_MEDIA_BYTES))
    except ValueError:
        return DEFAULT_MAX_MEDIA_BYTES
    return value if value > 0 else DEFAULT_MAX_MEDIA_BYTES


def _b64(text: str, field: str, what: str) -> bytes:
    limit = max_media_bytes()
    # Checked on the encoded length first, so an oversized body is never decoded.
    if len(text) > (limit + 2) // 3 * 4 + 4:
        raise MediaInputError(field, f"the {what} is larger than {limit} bytes (the server's limit, {MAX_MEDIA_ENV}); send a smaller one")
    try:
        data = base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise MediaInputError(field, f"the {what} is not valid base64") from None
    if not data:
        raise MediaInputError(field, f"the {what} is empty")
    if len(data) > limit:
        raise MediaInputError(field, f"the {what} is larger than {limit} bytes (the server's limit, {MAX_MEDIA_ENV}); send a smaller one")
    return data


def image_part(url: str, field: str) -> dict[str, str]:
    """The child's form of an `image_url` part's URL, which must be a base64 data: URI of an image."""
    if re.match(r"https?://", url, re.I):
        raise MediaInputError(field, "this server does not fetch image URLs (a server fetching addresses its clients "
                                     "name can be made to reach its own network); send the image inline as a data: URI, "
                                     "e.g. data:image/png;base64,iVBORw0...")
    match = DATA_URI.fullmatch(url)
    if not match:
        raise MediaInputError(field, "give the image as a data: URI, e.g. data:image/png;base64,iVBORw0...")
    if not match.group("b64"):
        raise MediaInputError(field, "the data: URI must be base64-encoded (data:image/png;base64,...)")
    mime = (match.group("mime") or "").lower()
    if mime and not mime.startswith("image/"):
        raise MediaInputError(field, f"the data: URI holds {mime}, not an image; send image/png, image/jpeg, image/gif or image/bmp")
    data = _b64(match.group("data"), field, "image")
    if not data.startswith(IMAGE_MAGIC) and not (data[:4] == b"RIFF" and data[8:12] == b"WEBP"):
        raise MediaInputError(field, "the data is not a PNG, JPEG, GIF, BMP or WebP image")
    return {"type": "image", "data": base64.b64encode(data).decode("ascii")}


def audio_part(data: str, audio_format: str, field: str) -> dict[str, str]:
    """The child's form of an `input_audio` part: base64 audio in one of AUDIO_FORMATS."""
    if audio_format not in AUDIO_FORMATS:
        raise MediaInputError(field + ".format", f"audio format {audio_format!r} is not read here; send one of {', '.join(AUDIO_FORMATS)}")
    decoded = _b64(data, field + ".data", "audio clip")
    return {"type": "audio", "data": base64.b64encode(decoded).decode("ascii")}


def media_kinds(messages: list[dict[str, Any]]) -> set[str]:
    """The kinds of media ("image", "audio") in messages of the child's form."""
    return {part["type"] for m in messages if isinstance(m.get("content"), list)
            for part in m["content"] if part.get("type") in ("image", "audio")}
