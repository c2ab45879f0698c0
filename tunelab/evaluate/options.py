"""What an evaluation may be asked for, and the refusals it may meet: `EvalOptions` (the
CLI's options and the API's body), the error classes the CLI and the API map to exit
codes and statuses, and reading a user's prompts file. Torch-free.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tunelab import paths

LM_EVAL_PIN = "lm-eval==0.4.13"
LM_EVAL_INSTALL = (f"lm-eval (lm-evaluation-harness) is not installed here; install it with "
                   f"`pip install 'tunelab[eval]'` (or `pip install {LM_EVAL_PIN}`) into the environment tunelab runs in, then run again")
MAX_PROMPTS = 50
MAX_PROMPT_CHARS = 8000
MAX_TASKS = 20


class EvalError(Exception):
    """Base of every refusal or failure; `field` names the option at fault, if any."""

    field: str | None = None


class EvalNotFound(EvalError):
    """No such run (CLI exit 1, HTTP 404)."""


class EvalRefused(EvalError):
    """The run cannot be evaluated as it is, or the machine cannot now (CLI exit 1, HTTP 409)."""


class EvalInputError(EvalError):
    """An option that cannot be honoured (CLI exit 2, HTTP 422)."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


class EvalFailed(EvalError):
    """The child failed (CLI exit 1, HTTP 500)."""


class EvalOptions(BaseModel):
    """What to evaluate. With none of perplexity, generations and tasks there is nothing to do."""

    model_config = ConfigDict(extra="forbid")
    checkpoint: int | None = Field(None, ge=0, le=2**62, description="Evaluate checkpoint-N of the run instead of its final weights.")
    perplexity: bool = Field(True, description="Loss and perplexity of the fine-tune and the base on the run's eval split.")
    generations: bool = Field(True, description="Answers of the base and the fine-tune to a prompt set, stored side by side.")
    prompts_file: str | None = Field(None, min_length=1, max_length=4096, description=(
        "A prompt set inside the data roots: .jsonl/.json (each item a string, or {\"messages\": [...], \"reference\"?}) "
        "or .txt (one prompt a line). Default: the first rows of the eval split."))
    max_prompts: int = Field(5, ge=1, le=MAX_PROMPTS, description="Prompts taken from the eval split (or the file).")
    max_new_tokens: int = Field(64, ge=1, le=1024, description="Longest answer per prompt, in tokens (greedy decoding).")
    tasks: list[str] = Field(default_factory=list, max_length=MAX_TASKS, description="lm-eval task names (needs lm-eval installed).")
    task_path: str | None = Field(None, min_length=1, max_length=4096, description="A folder of local lm-eval task YAML files, inside the data roots.")
    limit: int | None = Field(None, ge=1, le=1_000_000, description="lm-eval: at most this many examples per task.")

    @field_validator("tasks")
    @classmethod
    def _task_names(cls, value: list[str]) -> list[str]:
        names = [name.strip() for name in value if name.strip()]
        for name in names:
            if len(name) > 200 or any(c.isspace() or not c.isprintable() for c in name):
                raise ValueError(f"{name[:40]!r} is not a task name; give names like hellaswag or my_local_task")
        return names

def lm_eval_installed() -> bool:
    return importlib.util.find_spec("lm_eval") is not None

def _prompt_item(item: Any, where: str) -> dict[str, Any]:
    if isinstance(item, str) and item.strip():
        return {"messages": [{"role": "user", "content": item[:MAX_PROMPT_CHARS]}]}
    if isinstance(item, dict) and isinstance(item.get("messages"), list) and item["messages"]:
        messages = item["messages"]
        if all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages):
            prompt = {"messages": [{"role": m["role"], "content": m["content"][:MAX_PROMPT_CHARS]} for m in messages]}
            if isinstance(item.get("reference"), str):
                prompt["reference"] = item["reference"]
            return prompt
    raise EvalInputError("prompts_file", f"{where} is not a prompt: give a non-empty string, or "
                                         '{"messages": [{"role": "user", "content": "..."}], "reference": "..."}')


def resolve_readable(value: str, field: str, confined: bool) -> Path:
    """A path the caller may read: inside the data roots for an HTTP client (`confined`),
    anywhere for the machine's own CLI (relative to the working directory)."""
    try:
        if confined:
            return paths.check_readable(value, field)
        paths.check_usable(value, field)
        return Path(os.path.expanduser(value)).resolve()
    except paths.PathNotAllowed as exc:
        raise EvalInputError(field, str(exc)) from None


def read_prompts(value: str, limit: int, confined: bool = True) -> tuple[Path, list[dict[str, Any]]]:
    """The prompts of a user's file (inside the data roots when `confined`)."""
    path = resolve_readable(value, "prompts_file", confined)
    if not path.is_file():
        raise EvalInputError("prompts_file", f"{path} does not exist or is not a file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalInputError("prompts_file", f"cannot read {path.name} as UTF-8 text: {exc}") from None
    suffix = path.suffix.lower()
    try:
        if suffix == ".txt":
            items: list[Any] = [line for line in text.splitlines() if line.strip()]
        elif suffix == ".jsonl":
            items = [json.loads(line) for line in text.splitlines() if line.strip()]
        elif suffix == ".json":
            items = json.loads(text)
            if not isinstance(items, list):
                raise EvalInputError("prompts_file", f"{path.name} must hold a JSON list of prompts")
        else:
            raise EvalInputError("prompts_file", f"{path.name}: use a .jsonl, .json or .txt file")
    except ValueError as exc:
        raise EvalInputError("prompts_file", f"{path.name} is not valid JSON: {exc}") from None
    prompts = [_prompt_item(item, f"item {i} of {path.name}") for i, item in enumerate(items[:limit], 1)]
    if not prompts:
        raise EvalInputError("prompts_file", f"{path.name} holds no prompts")
    return path, prompts
