"""GRPO's reward functions, built from the config's `rewards` list (`grpo_settings`).

`reward_functions(config)` returns one callable per entry, in TRL's reward-function form
f(prompts, completions, **columns) -> list of floats, each with a unique `__name__`
(TRL logs rewards/<name>/mean and /std under it: exact_match, regex, regex_2, ...), and
their weights. A completion is a string, or for chat prompts a list holding one assistant
turn; the built-ins read its text either way. The user's `python` reward is imported
here, in the worker, from its file: a missing file, a syntax error or a missing function
is a RunSettingError naming rewards.N.path / rewards.N.function.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tunelab.config.grpo import DEFAULT_MAX_CHARS, REFERENCE_REWARDS, RewardSpec
from tunelab.worker.context import RunSettingError

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

FENCED_JSON = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def text_of(completion: Any) -> str:
    """A completion's text: the string itself, or the content of its assistant turns."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(str(turn.get("content") or "") for turn in completion if isinstance(turn, dict))
    return "" if completion is None else str(completion)


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def _references(kwargs: dict[str, Any], count: int) -> list[str]:
    references = kwargs.get("reference")
    if references is None:
        raise RunSettingError("rewards", "the exact_match and contains rewards compare completions with a reference answer, and "
                                         "the data has no reference column; add a reference (or answer) column, map one with "
                                         "column_mapping: {reference: your_column}, or choose other rewards")
    return [str(r) for r in references][:count]


def exact_match(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    return [float(_norm(text_of(c)) == _norm(r)) for c, r in zip(completions, _references(kwargs, len(completions)))]


def contains(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    return [float(_norm(r) in _norm(text_of(c))) for c, r in zip(completions, _references(kwargs, len(completions)))]


def json_valid(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    return [float(_is_json(text_of(c))) for c in completions]


def _is_json(text: str) -> bool:
    text = text.strip()
    fenced = FENCED_JSON.match(text)
    try:
        json.loads(fenced.group(1) if fenced else text)
    except ValueError:
        return False
    return True


def regex(pattern: str) -> Callable[..., list[float]]:
    compiled = re.compile(pattern)

    def reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        return [float(compiled.search(text_of(c)) is not None) for c in completions]

    return reward


def length_penalty(max_chars: int) -> Callable[..., list[float]]:
    def reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        return [-min(1.0, max(0, len(text_of(c)) - max_chars) / max_chars) for c in completions]

    return reward


def _user_function(spec: RewardSpec, index: int) -> Callable[..., Any]:
    path = Path(spec.path).expanduser()
    where = f"rewards.{index}"
    if not path.is_file():
        raise RunSettingError(f"{where}.path", f"the reward file {str(path)!r} does not exist; give the path of a .py file "
                                               "that defines the reward function")
    module_name = f"tunelab_user_reward_{index}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module  # picklable functions, dataclasses and the like need their module registered
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:
        raise RunSettingError(f"{where}.path", f"importing the reward file {str(path)!r} failed: {type(exc).__name__}: {exc}; fix the file") from exc
    function = getattr(module, spec.function, None)
    if not callable(function):
        defined = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise RunSettingError(f"{where}.function", f"{str(path)!r} defines no function {spec.function!r} (it defines "
                                                   f"{defined or 'none'}); set function to one of them")
    return function


def _built(spec: RewardSpec, index: int) -> Callable[..., Any]:
    name = spec.name
    if name == "exact_match":
        return exact_match
    if name == "contains":
        return contains
    if name == "json":
        return json_valid
    if name == "regex":
        return regex(spec.pattern)
    if name == "length":
        return length_penalty(spec.max_chars or DEFAULT_MAX_CHARS)
    return _user_function(spec, index)


def reward_functions(config: WorkerConfig) -> tuple[list[Callable[..., Any]], list[float]]:
    """The run's reward functions, each under its own name, and their weights."""
    functions, weights, seen = [], [], {}
    for index, spec in enumerate(config.rewards):
        function = _built(spec, index)
        base = spec.function if spec.name == "python" else spec.name
        seen[base] = seen.get(base, 0) + 1
        name = base if seen[base] == 1 else f"{base}_{seen[base]}"
        functions.append(_named(function, name))
        weights.append(spec.weight)
    return functions, weights


def _named(function: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The function under `name` (TRL's metric name), without renaming a shared built-in."""
    def reward(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    reward.__name__ = name
    return reward


def needs_reference(config: WorkerConfig) -> bool:
    return any(spec.name in REFERENCE_REWARDS for spec in config.rewards)
