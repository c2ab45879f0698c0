"""The OpenAI-compatible request shapes, checked here, and turned into a tunelab `Sampling`.

Fields follow OpenAI's chat and completions APIs. Parameters tunelab cannot honour
(n > 1, log probabilities, tools, penalties, echo) are refused by name rather than
silently ignored; fields a client sends that change nothing (user, metadata, store) are
accepted. `min_tokens` is vLLM's extension: tokens before an end token may end the answer.
Every failure is an `OpenAIError` naming the parameter, in OpenAI's error shape.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

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


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None

    def plain(self) -> dict[str, str]:
        content = self.content if isinstance(self.content, str) else "".join(p.text for p in self.content or [])
        # "developer" is OpenAI's newer name for the system turn; chat templates know "system".
        return {"role": "system" if self.role == "developer" else self.role, "content": content}


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
        raise OpenAIError(400, f"{param}: {first['msg']}" if param else first["msg"], param=param) from None
    for name, unused in UNSUPPORTED.items():
        value = body.get(name)
        if value not in unused:
            raise OpenAIError(400, f"{name}: tunelab does not support {name}={value!r}; leave it out", param=name)
    return request
