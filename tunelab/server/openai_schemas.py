"""The OpenAI-compatible request shapes, checked here, and turned into a tunelab `Sampling`.

Fields follow OpenAI's chat and completions APIs. Parameters tunelab cannot honour
(n > 1, log probabilities, tools, penalties, echo) are refused by name rather than
silently ignored; fields a client sends that change nothing (user, metadata, store) are
accepted. `min_tokens` is vLLM's extension: tokens before an end token may end the answer.
Chat content may hold images (`image_url` parts with base64 data: URIs) and audio clips
(`input_audio` parts), checked by `inference.media_input`.
Every failure is an `OpenAIError` naming the parameter, in OpenAI's error shape.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tunelab.inference.media_input import MAX_MEDIA_ENV, MAX_MEDIA_PARTS, MediaInputError, audio_part, image_part, max_media_bytes
from tunelab.inference.settings import MAX_NEW_TOKENS_LIMIT, Sampling

# OpenAI's own default for completions is 16 tokens; chat answers get room for a reply.
DEFAULT_CHAT_MAX_TOKENS = 512
DEFAULT_COMPLETION_MAX_TOKENS = 16
# (parameter, the values that mean "not used") for parameters tunelab does not implement.
UNSUPPORTED = {"n": (None, 1), "best_of": (None, 1), "logprobs": (None, False), "top_logprobs": (None, 0),
               "tools": (None, []), "functions": (None, []), "echo": (None, False), "suffix": (None, ""),
               "presence_penalty": (None, 0, 0.0), "frequency_penalty": (None, 0, 0.0), "logit_bias": (None, {})}


class OpenAIError(Exception):
    """A refused request: HTTP `status`, OpenAI `type`, the parameter at fault, a tunelab code."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str = "invalid_input",
                 kind: str = "invalid_request_error"):
        self.status, self.param, self.code, self.kind = status, param, code, kind
        super().__init__(message)

    def body(self) -> dict[str, Any]:
        # OpenAI's fields (message, type, param, code) and tunelab's (code, message, field) at once.
        error = {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}
        if self.param:
            error["field"] = self.param
        return {"error": error}


PART_TYPES = ("text", "image_url", "input_audio")


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ImageUrl(BaseModel):
    model_config = ConfigDict(extra="ignore")
    url: str = Field(min_length=1)
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(BaseModel):
    type: Literal["image_url"]
    image_url: ImageUrl


class InputAudio(BaseModel):
    data: str = Field(min_length=1)
    format: str


class AudioPart(BaseModel):
    type: Literal["input_audio"]
    input_audio: InputAudio


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[Annotated[TextPart | ImagePart | AudioPart, Field(discriminator="type")]] | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _known_parts(cls, value: Any) -> Any:
        if isinstance(value, list):
            for j, part in enumerate(value):
                kind = part.get("type") if isinstance(part, dict) else None
                if kind not in PART_TYPES:
                    raise ValueError(f"part {j} has type {kind!r}; content parts are {', '.join(PART_TYPES)} "
                                     "(an image as a base64 data: URI, audio as base64 input_audio)")
        return value

    def plain(self, index: int) -> dict[str, Any]:
        """The message as the inference child takes it: text content as one string, or,
        with images or audio, a list of text parts and checked media parts (media_input)."""
        # "developer" is OpenAI's newer name for the system turn; chat templates know "system".
        role = "system" if self.role == "developer" else self.role
        if isinstance(self.content, str) or not self.content:
            return {"role": role, "content": self.content or ""}
        if all(isinstance(part, TextPart) for part in self.content):
            return {"role": role, "content": "".join(part.text for part in self.content)}
        parts: list[dict[str, str]] = []
        for j, part in enumerate(self.content):
            field = f"messages.{index}.content.{j}"
            try:
                if isinstance(part, ImagePart):
                    parts.append(image_part(part.image_url.url, field + ".image_url.url"))
                elif isinstance(part, AudioPart):
                    parts.append(audio_part(part.input_audio.data, part.input_audio.format, field + ".input_audio"))
                else:
                    parts.append({"type": "text", "text": part.text})
            except MediaInputError as exc:
                raise OpenAIError(400, str(exc), param=exc.field) from None
        return {"role": role, "content": parts}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = Field(min_length=1, max_length=200)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1, le=MAX_NEW_TOKENS_LIMIT)
    min_tokens: int | None = Field(None, ge=0, le=MAX_NEW_TOKENS_LIMIT)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    stream: bool | None = False
    stream_options: StreamOptions | None = None

    def sampling(self, default_max: int) -> Sampling:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        max_tokens = self.max_tokens or default_max
        values = {"temperature": 1.0 if self.temperature is None else self.temperature,
                  "top_p": 1.0 if self.top_p is None else self.top_p, "max_new_tokens": max_tokens,
                  "min_new_tokens": self.min_tokens or 0, "stop": tuple(stop), "seed": self.seed}
        try:
            return Sampling(**values)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = str(first["loc"][0]) if first["loc"] else "min_new_tokens"  # the only rule across fields
            name = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens"}.get(loc, loc)
            message = first["msg"].removeprefix("Value error, ").replace("_new_tokens", "_tokens")
            raise OpenAIError(400, f"{name}: {message}", param=name) from None


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1, max_length=1000)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_NEW_TOKENS_LIMIT)

    def child_messages(self) -> list[dict[str, Any]]:
        """The messages in the inference child's form, each media part checked (400 naming the part)."""
        media = sum(1 for m in self.messages if isinstance(m.content, list) for p in m.content if not isinstance(p, TextPart))
        if media > MAX_MEDIA_PARTS:
            raise OpenAIError(400, f"messages: {media} images or audio clips in one request; send at most {MAX_MEDIA_PARTS}",
                              param="messages")
        messages = [message.plain(i) for i, message in enumerate(self.messages)]
        total = sum(len(part["data"]) * 3 // 4 for m in messages if isinstance(m["content"], list)
                    for part in m["content"] if "data" in part)
        if total > max_media_bytes():
            raise OpenAIError(400, f"messages: the images and audio clips of this request total {total} bytes, more than "
                                   f"{max_media_bytes()} (the server's limit, {MAX_MEDIA_ENV}); send fewer or smaller ones",
                              param="messages")
        return messages

    def sampling(self, default_max: int = DEFAULT_CHAT_MAX_TOKENS) -> Sampling:
        if self.max_completion_tokens is not None and self.max_tokens is None:
            self.max_tokens = self.max_completion_tokens
        return super().sampling(default_max)


class CompletionRequest(_Common):
    prompt: str | list[str]

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and len(value) != 1:
            raise ValueError("send one prompt (a string); several prompts in one request are not supported")
        return value

    def text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]

    def sampling(self, default_max: int = DEFAULT_COMPLETION_MAX_TOKENS) -> Sampling:
        return super().sampling(default_max)


def parse(model: type[_Common], body: Any) -> Any:
    """`body` checked as `model`, or an OpenAIError naming the first bad parameter."""
    if not isinstance(body, dict):
        raise OpenAIError(400, "the body must be one JSON object", param=None)
    try:
        request = model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(part) for part in first["loc"]) or None
        message = first["msg"].removeprefix("Value error, ")
        raise OpenAIError(400, f"{param}: {message}" if param else message, param=param) from None
    for name, unused in UNSUPPORTED.items():
        value = body.get(name)
        if value not in unused:
            raise OpenAIError(400, f"{name}: tunelab does not support {name}={value!r}; leave it out", param=name)
    return request
