"""The settings only `objective: grpo` reads — its reward functions and generation
settings — with their checks (called by config/run_config.py). Torch-free, like config/run_config.py.

`rewards` is a list of reward functions, each chosen by `name` with a `weight` (TRL's
`reward_weights`; the run's reward is their weighted sum):
  exact_match  1 when the completion equals the row's reference answer (case and
               surrounding whitespace ignored), else 0
  contains     1 when the completion contains the reference answer (case ignored), else 0
  regex        1 when `pattern` (a Python regular expression) is found in the completion
               (re.search; anchor it with ^...$ to demand the whole completion), else 0
  length       a length penalty: 0 up to `max_chars` characters (default 200), falling
               linearly to -1 at twice that
  json         1 when the completion is valid JSON (a ```json fenced block counts), else 0
  python       your own function `function` in the file `path`, called as TRL calls a
               reward function: f(prompts, completions, **columns) -> one float per
               completion. It runs in the training worker only; over HTTP the file must lie
               inside the data roots and the server must be started with
               `tunelab serve --allow-reward-code` (it is code execution).
e.g. rewards: [{name: exact_match, weight: 1.0}, {name: regex, pattern: "^The answer is", weight: 0.5},
               {name: python, path: rewards.py, function: my_reward}]
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tunelab.config.form import form
from tunelab.text import char_name, first_unsafe_char

RewardName = Literal["exact_match", "contains", "regex", "length", "json", "python"]
REFERENCE_REWARDS = ("exact_match", "contains")
# Which options each reward reads; any other option on it is refused naming it.
REWARD_OPTIONS = {"exact_match": (), "contains": (), "regex": ("pattern",), "length": ("max_chars",),
                  "json": (), "python": ("path", "function")}
GRPO_FIELDS = ("rewards", "num_generations", "max_completion_length", "temperature")
DEFAULT_NUM_GENERATIONS = 4
DEFAULT_MAX_COMPLETION_LENGTH = 64
DEFAULT_TEMPERATURE = 1.0
DEFAULT_MAX_CHARS = 200
REWARDS_EXAMPLE = "rewards: [{name: exact_match, weight: 1.0}, {name: regex, pattern: \"^The answer is\", weight: 0.5}]"

REWARDS_HELP = ("objective=grpo only: the reward functions, each {name, weight (default 1.0), options}, summed with their "
                "weights. name: exact_match | contains (the completion against the row's reference answer, a 'reference' or "
                "'answer' column) | regex (pattern: a Python regular expression searched in the completion) | length "
                "(max_chars: 0 up to that many characters, down to -1 at twice it) | json (valid JSON) | python (path: a .py "
                "file, function: its name, called as f(prompts, completions, **columns) -> list of floats; over HTTP only "
                "inside the data roots and with `tunelab serve --allow-reward-code`). E.g. " + REWARDS_EXAMPLE + ".")
NUM_GENERATIONS_HELP = ("objective=grpo only: completions sampled per prompt, compared with each other (2 or more). "
                        "batch_size x gradient_accumulation_steps counts completions and must be a multiple of it. Empty: 4.")
MAX_COMPLETION_LENGTH_HELP = "objective=grpo only: the most tokens generated per completion. Empty: 64."
TEMPERATURE_HELP = "objective=grpo only: sampling temperature of the completions (higher = more varied). Empty: 1.0."


class RewardSpec(BaseModel):
    """One reward function of a GRPO run (see the module doc)."""

    model_config = ConfigDict(extra="forbid")
    name: RewardName = Field(description="exact_match | contains | regex | length | json | python",
                              json_schema_extra=form("Reward", "GRPO"))
    weight: float = Field(1.0, ge=-1000, le=1000, description="Its weight in the summed reward.",
                          json_schema_extra=form("Weight", "GRPO"))
    pattern: str | None = Field(None, max_length=1000, description="regex: the pattern searched in each completion.",
                                json_schema_extra=form("Pattern", "GRPO"))
    max_chars: int | None = Field(None, ge=1, le=1_000_000, description="length: completions up to this long are not penalised.",
                                  json_schema_extra=form("Most characters", "GRPO"))
    path: str | None = Field(None, max_length=4096, description="python: the .py file holding the function.",
                             json_schema_extra=form("Reward file", "GRPO"))
    function: str | None = Field(None, max_length=256, description="python: the function's name in that file.",
                                 json_schema_extra=form("Reward function", "GRPO"))

    @field_validator("path", "function")
    @classmethod
    def _plain(cls, v: str | None) -> str | None:
        found = first_unsafe_char(v) if v is not None else None
        if found is not None:
            raise ValueError(f"contains {char_name(found[1])}, a control or bidi-override character, at position {found[0]}; "
                             "remove it: names and paths must be plain text")
        return v


def uses_reward_code(config: Any) -> bool:
    """Whether a config (a RunConfig or its dict form) names a user's Python reward file."""
    rewards = config.get("rewards") if isinstance(config, dict) else getattr(config, "rewards", None)
    return any(_get(r, "name") == "python" for r in rewards or [])


def _get(spec: Any, key: str) -> Any:
    return spec.get(key) if isinstance(spec, dict) else getattr(spec, key, None)


def generation_settings(config: Any) -> dict[str, Any]:
    """num_generations, max_completion_length and temperature of a run config, where it
    left them out (None) the GRPO defaults."""
    return {"num_generations": config.num_generations or DEFAULT_NUM_GENERATIONS,
            "max_completion_length": config.max_completion_length or DEFAULT_MAX_COMPLETION_LENGTH,
            "temperature": DEFAULT_TEMPERATURE if config.temperature is None else config.temperature}


def grpo_errors(cfg: Any) -> list[tuple[str, str]]:
    """(field, message) for each GRPO setting that cannot train."""
    if cfg.objective != "grpo":
        return [(name, f"{name} is a GRPO setting and objective={cfg.objective} does not read it; remove {name} or set objective=grpo")
                for name in GRPO_FIELDS if getattr(cfg, name) not in (None, [])]
    errs: list[tuple[str, str]] = []
    if not cfg.rewards:
        errs.append(("rewards", f"objective=grpo learns from rewards and none is set; add at least one, e.g. {REWARDS_EXAMPLE}"))
    for i, spec in enumerate(cfg.rewards):
        errs.extend(_reward_errors(i, spec))
    if cfg.rewards and all(spec.weight == 0 for spec in cfg.rewards):
        errs.append(("rewards", "every reward has weight 0, so nothing would be learned; give at least one a non-zero weight"))
    generations = cfg.num_generations or DEFAULT_NUM_GENERATIONS
    completions = cfg.batch_size * cfg.gradient_accumulation_steps
    if completions % generations:
        fits = [g for g in range(2, completions + 1) if completions % g == 0][:4]
        errs.append(("num_generations", f"batch_size x gradient_accumulation_steps = {cfg.batch_size} x {cfg.gradient_accumulation_steps} = "
                                        f"{completions} completions per step, which TRL needs to be a multiple of num_generations "
                                        f"({generations}); set num_generations to {' or '.join(map(str, fits)) or 'a divisor of it'}, "
                                        f"or batch_size or gradient_accumulation_steps so that their product is a multiple of {generations}"))
    return errs


def _reward_errors(i: int, spec: RewardSpec) -> list[tuple[str, str]]:
    where = f"rewards.{i}"
    errs = [(f"{where}.{option}", f"{option} is not an option of the {spec.name} reward (it reads "
                                  f"{', '.join(REWARD_OPTIONS[spec.name]) or 'no options'}); remove it")
            for option in ("pattern", "max_chars", "path", "function")
            if getattr(spec, option) is not None and option not in REWARD_OPTIONS[spec.name]]
    if spec.name == "regex":
        if not spec.pattern:
            errs.append((f"{where}.pattern", "the regex reward needs a pattern, e.g. {name: regex, pattern: \"^The answer is \\\\d+\"}"))
        else:
            try:
                re.compile(spec.pattern)
            except re.error as exc:
                errs.append((f"{where}.pattern", f"{spec.pattern!r} is not a valid regular expression ({exc}); fix the pattern"))
    if spec.name == "python":
        if not spec.path:
            errs.append((f"{where}.path", "the python reward needs path: the .py file that defines the function"))
        elif not spec.path.endswith(".py"):
            errs.append((f"{where}.path", f"{spec.path!r} is not a .py file; name the Python file that defines the function"))
        if not spec.function:
            errs.append((f"{where}.function", "the python reward needs function: the name of the reward function in that file"))
        elif not spec.function.isidentifier():
            errs.append((f"{where}.function", f"{spec.function!r} is not a Python name; give the function's name, e.g. my_reward"))
    return errs
