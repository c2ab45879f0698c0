"""The bounds of one generation, shared by `tunelab chat` and the OpenAI endpoints.

`Sampling` is what a caller may choose (checked here, once, with messages naming the
field); the time cap and the idle close are the operator's, from the environment.
"""

from __future__ import annotations


from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tunelab.env_seconds import positive_seconds

MAX_NEW_TOKENS_LIMIT = 4096
DEFAULT_MAX_NEW_TOKENS = 256
MAX_STOP_STRINGS = 4
MAX_STOP_CHARS = 200
# Longest a generation may run, whatever max_new_tokens says; then it ends with "length".
MAX_TIME_ENV = "TUNELAB_INFERENCE_MAX_TIME_S"
DEFAULT_MAX_TIME_S = 300.0
# A served model's child closes after this long without a request, and frees its memory.
IDLE_ENV = "TUNELAB_INFERENCE_IDLE_S"
DEFAULT_IDLE_S = 600.0
# Loading a model (imports, weights) may take this long before the child counts as failed.
LOAD_TIMEOUT_ENV = "TUNELAB_INFERENCE_LOAD_TIMEOUT_S"
DEFAULT_LOAD_TIMEOUT_S = 600.0


class Sampling(BaseModel):
    """How to sample one answer. temperature 0 means greedy decoding."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    temperature: float = Field(0.7, ge=0, le=2, description="0 (greedy) to 2.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling: above 0, at most 1.")
    max_new_tokens: int = Field(DEFAULT_MAX_NEW_TOKENS, ge=1, le=MAX_NEW_TOKENS_LIMIT)
    min_new_tokens: int = Field(0, ge=0, le=MAX_NEW_TOKENS_LIMIT, description="Tokens generated before an end token may end the answer.")
    stop: tuple[str, ...] = Field((), max_length=MAX_STOP_STRINGS, description="Text that ends the answer (not included).")
    seed: int | None = Field(None, ge=0, le=2**63 - 1)

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for text in value:
            if not text or len(text) > MAX_STOP_CHARS:
                raise ValueError(f"each stop string must have 1 to {MAX_STOP_CHARS} characters")
        return value

    @model_validator(mode="after")
    def _min_within_max(self) -> "Sampling":
        if self.min_new_tokens > self.max_new_tokens:
            raise ValueError(f"min_new_tokens ({self.min_new_tokens}) exceeds max_new_tokens ({self.max_new_tokens})")
        return self


def max_time_s() -> float:
    return positive_seconds(MAX_TIME_ENV, DEFAULT_MAX_TIME_S)


def idle_s() -> float:
    return positive_seconds(IDLE_ENV, DEFAULT_IDLE_S)


def load_timeout_s() -> float:
    return positive_seconds(LOAD_TIMEOUT_ENV, DEFAULT_LOAD_TIMEOUT_S)
