"""A sweep file, read and checked before any trial starts.

A sweep is a base run config (`base`: a mapping, or the path of a run config file), a
search `space` over run fields, an `objective` (a metric each trial reports, and whether
to minimise or maximise it), a budget (`trials`, `max_hours`), `parallel` trials at once,
a `sampler` and a `pruner`. Every problem is a ConfigError naming its field
(`space.lora_r`, `objective.metric`, ...). Each corner of the space (every low and high,
every choice) is validated as a whole RunConfig with the real checks, so a sweep that
could make an invalid trial is refused up front, not halfway through.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tunelab.config.run_config import ConfigError, RunConfig, parse_config
from tunelab.config.errors import FieldError
from tunelab.events import is_extra_name
from tunelab.store import METRIC_FIELDS

KINDS = ("log_uniform", "uniform", "int", "choice")
# Fields a sweep may not vary: they say where and how a run runs, not how well it trains.
NOT_SEARCHABLE = ("output_dir", "resume_from", "model_name", "display_name", "queue", "gpu_ids", "num_gpus",
                  "nodes", "ray_address", "export_after")
# Corners checked per trial config: enough to catch a bad bound without a product blow-up.
MAX_CORNERS = 64


class Objective(BaseModel):
    model_config = ConfigDict(extra="forbid")
    metric: str = Field("eval_loss", description="A metric each trial reports: eval_loss, loss or a logged extra (eval_ndcg@10, eval_wer, a reward).")
    direction: Literal["minimize", "maximize"] = "minimize"


class SweepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(..., min_length=1, max_length=100, description="The sweep's name; running the same name again resumes it.")
    base: dict[str, Any]
    space: dict[str, dict[str, Any]] = Field(..., min_length=1)
    objective: Objective = Objective()
    trials: int = Field(8, ge=1, le=10_000)
    max_hours: float | None = Field(None, gt=0)
    parallel: int = Field(1, ge=1, le=64)
    sampler: Literal["tpe", "random", "grid"] = "tpe"
    pruner: Literal["median", "successive_halving", "none"] = "median"
    pruner_startup_trials: int = Field(2, ge=0, description="Trials that finish before the median pruner may prune.")
    seed: int | None = None

    def trial_config(self, params: dict[str, Any], number: int) -> RunConfig:
        """The run config of trial `number`: the base with `params` set, named after the sweep."""
        label = self.base.get("display_name") or self.name
        return parse_config({**self.base, **params, "display_name": f"{label} #{number}"})


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and check a sweep file; ConfigError naming the field on any problem."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError.single("sweep", f"cannot read {path}: {exc.strerror}; check the path") from None
    except yaml.YAMLError as exc:
        raise ConfigError.single("sweep", f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError.single("sweep", f"{path} must hold a mapping (base, space, objective, trials, ...)")
    data.setdefault("name", path.stem)
    if isinstance(data.get("base"), str):  # a run config file next to the sweep file
        base_path = (path.parent / data["base"]) if not Path(data["base"]).is_absolute() else Path(data["base"])
        try:
            data["base"] = yaml.safe_load(base_path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError.single("base", f"cannot read the run config {base_path}: {exc}") from None
    for key in ("local_datasets", "local_eval_datasets"):  # relative to the file, like `tunelab train`
        if isinstance(data.get("base"), dict) and isinstance(data["base"].get(key), list):
            data["base"][key] = [p if Path(p).is_absolute() else str((path.parent / p).resolve()) for p in data["base"][key]]
    return check_sweep(data)


def check_sweep(data: dict[str, Any]) -> SweepSpec:
    """Validate a sweep mapping completely (shape, space, objective, every trial corner)."""
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError([FieldError(field=".".join(str(p) for p in e["loc"]) or "sweep", message=e["msg"])
                           for e in exc.errors()]) from None
    if spec.base.get("output_dir"):
        raise ConfigError.single("base.output_dir", "every trial gets a folder of its own; leave output_dir out of a sweep")
    try:
        base = parse_config(spec.base)
    except ConfigError as exc:
        raise ConfigError([FieldError(field=f"base.{e.field}", message=e.message) for e in exc.errors]) from None
    choices = {field: _dimension(field, rule) for field, rule in spec.space.items()}
    _check_objective(spec, base)
    if spec.sampler == "grid" and any(kind in ("log_uniform", "uniform") for kind, _ in choices.values()):
        bad = next(f for f, (kind, _) in choices.items() if kind in ("log_uniform", "uniform"))
        raise ConfigError.single(f"space.{bad}", "the grid sampler needs a finite set: use choice or int, or sampler: tpe")
    check_corners(spec)
    return spec


def _dimension(field: str, rule: Any) -> tuple[str, list[Any]]:
    """One space entry checked: (kind, its bounds or choices)."""
    where = f"space.{field}"
    if field not in RunConfig.model_fields:
        raise ConfigError.single(where, f"'{field}' is not a run setting; see `tunelab fields` for the settings")
    if field in NOT_SEARCHABLE:
        raise ConfigError.single(where, f"'{field}' says where or how a run runs; set it in base, not in the space")
    if not isinstance(rule, dict) or len(rule) != 1 or next(iter(rule)) not in KINDS:
        raise ConfigError.single(where, f"give one of {', '.join(KINDS)}, e.g. {{log_uniform: [1e-5, 1e-3]}}")
    kind, values = next(iter(rule.items()))
    if not isinstance(values, list) or not values:
        raise ConfigError.single(where, f"{kind} needs a non-empty list")
    if kind == "choice":
        return kind, values
    if len(values) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise ConfigError.single(where, f"{kind} needs [low, high], two numbers")
    low, high = values
    if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
        raise ConfigError.single(where, f"{kind} range [{low}, {high}] is empty; low must be below high")
    if kind == "log_uniform" and low <= 0:
        raise ConfigError.single(where, f"a log range must lie above zero (got low {low}); use uniform, or a positive low")
    if kind == "int" and not (float(low).is_integer() and float(high).is_integer()):
        raise ConfigError.single(where, "int needs whole numbers [low, high]")
    return kind, [int(low), int(high)] if kind == "int" else [float(low), float(high)]


def _check_objective(spec: SweepSpec, base: RunConfig) -> None:
    metric = spec.objective.metric
    if metric not in METRIC_FIELDS and not is_extra_name(metric):
        raise ConfigError.single("objective.metric", f"'{metric}' is not a metric name; use eval_loss, loss or a logged metric")
    if metric.startswith("eval_") and not base.eval_steps and "eval_steps" not in spec.space:
        raise ConfigError.single("objective.metric", f"no trial would report {metric}: eval is off in base (eval_steps: 0); "
                                                     "set eval_steps and eval data (eval_holdout, eval_split or local_eval_datasets)")


def corners(spec: SweepSpec) -> Iterator[dict[str, Any]]:
    """The combinations of the space's bounds and choices (at most MAX_CORNERS)."""
    axes = [[(field, v) for v in values] for field, (_kind, values) in dimensions(spec).items()]
    return (dict(combo) for combo in itertools.islice(itertools.product(*axes), MAX_CORNERS))


def check_corners(spec: SweepSpec, check: Callable[[RunConfig], None] = lambda _cfg: None) -> None:
    """Every corner is a valid run config, and passes `check` (e.g. this machine's checks)."""
    for params in corners(spec):
        try:
            check(parse_config({**spec.base, **params}))
        except ConfigError as exc:
            err = exc.errors[0]
            where = f"space.{err.field}" if err.field in params else f"base.{err.field}"
            raise ConfigError.single(where, f"with {params}: {err.message}") from None


def dimensions(spec: SweepSpec) -> dict[str, tuple[str, list[Any]]]:
    """The checked space: {field: (kind, bounds or choices)}."""
    return {field: _dimension(field, rule) for field, rule in spec.space.items()}
