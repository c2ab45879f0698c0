"""Run one evaluation of a run and store its results: `run_eval(store, run_id, options)`.

Torch-free; `tunelab eval` and `POST /api/runs/{id}/eval` call it. It checks the request
here, with messages naming the field (no such run, no weights, no eval split, a prompts
file outside the data roots, lm-eval not installed), then starts the eval child on the
device the inference rules choose (`inference.devices.choose_device`: never a GPU a
training run holds) and stores each result as it arrives (`tunelab.store.evals`). Should a
training run claim the child's GPU meanwhile, the child is ended and the evaluation
refused, leaving the GPU to the run; what was stored by then stays.

Stored payloads:
  perplexity   {"fine_tune": {"loss", "perplexity"}, "base": {...}, "rows", "tokens", "batch_size", "device", "step"}
  generations  {"source", "sampling", "items": [{"messages" | "prompt", "reference"?, "base": {"text",
                "finish_reason", "tokens"}, "fine_tune": {...}}], "step"}
  lm_eval      {"tasks", "scores": {task: {metric: value}}, "samples": {task: n}, "limit", "step"}
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

from tunelab import paths
from tunelab.store.evals import add_eval
from tunelab.evaluate.options import (
    LM_EVAL_INSTALL,
    EvalError,
    EvalFailed,
    EvalInputError,
    EvalNotFound,
    EvalOptions,
    EvalRefused,
    lm_eval_installed,
    read_prompts,
    resolve_readable,
)
from tunelab.inference.child_process import ChildProcess
from tunelab.inference.devices import choose_device
from tunelab.inference.settings import max_time_s
from tunelab.inference.target import InferenceError, TargetInputError, TargetNotFound, resolve_target

__all__ = ["EvalError", "EvalFailed", "EvalInputError", "EvalNotFound", "EvalOptions", "EvalRefused", "build_request",
           "lm_eval_installed", "run_eval"]

# The whole evaluation (load, loss, answers, tasks) may take this long, then it is ended.
MAX_TIME_ENV = "TUNELAB_EVAL_MAX_TIME_S"
DEFAULT_MAX_TIME_S = 3600.0
DEVICE_POLL_S = 1.0


def eval_max_time_s() -> float:
    try:
        value = float(os.environ.get(MAX_TIME_ENV, DEFAULT_MAX_TIME_S))
    except ValueError:
        return DEFAULT_MAX_TIME_S
    return value if value > 0 else DEFAULT_MAX_TIME_S


def has_eval_split(config: dict[str, Any]) -> bool:
    """Whether the run's training built an eval split (`sources.load_raw` builds one only then)."""
    return float(config.get("eval_steps") or 0) > 0


def build_request(run: dict[str, Any] | None, run_id: int, options: EvalOptions, confined: bool = True) -> tuple[Any, dict[str, Any]]:
    """(the ModelTarget, the child's request), or the refusal that names the fix."""
    if not (options.perplexity or options.generations or options.tasks):
        raise EvalInputError("perplexity", "nothing to evaluate: keep perplexity or generations on, or name lm-eval tasks")
    try:
        target = resolve_target(run, run_id, options.checkpoint, evaluate=True)
    except TargetNotFound as exc:
        raise EvalNotFound(str(exc).replace("chat with it", "evaluate it")) from None
    except TargetInputError as exc:
        raise EvalInputError(exc.field or "checkpoint", str(exc)) from None
    except InferenceError as exc:
        message = str(exc).replace("chat with it", "evaluate it").replace("chat and serving cover", "evaluation covers")
        raise EvalRefused(message) from None
    config = dict(run.get("config") or {})
    prompts, prompts_file = None, None
    if options.generations and options.prompts_file:
        found, prompts = read_prompts(options.prompts_file, options.max_prompts, confined)
        prompts_file = str(found)
    needs_split = options.perplexity or (options.generations and prompts is None)
    if needs_split and (config.get("objective") or "sft") != "sft":
        raise EvalInputError("perplexity" if options.perplexity else "prompts_file",
                             f"run {run_id} trained with objective {config['objective']}: its eval rows are preference pairs, "
                             "which have no single answer to measure; turn perplexity off and give a prompts file")
    if needs_split and not has_eval_split(config):
        raise EvalInputError("perplexity" if options.perplexity else "prompts_file",
                             f"run {run_id} has no eval split: it trained with eval_steps=0, so no rows were held out and "
                             "every row was trained on. Train with eval_steps > 0 (and eval_split, local_eval_datasets or "
                             "eval_holdout), or give a prompts file and turn perplexity off")
    task_path = None
    if options.tasks:
        if not lm_eval_installed():
            raise EvalRefused(LM_EVAL_INSTALL)
        if options.task_path:
            found_dir = resolve_readable(options.task_path, "task_path", confined)
            if not found_dir.is_dir():
                raise EvalInputError("task_path", f"{found_dir} is not a folder; give the folder that holds the task YAML files")
            task_path = str(found_dir)
    from tunelab.inference.settings import Sampling

    sampling = Sampling(temperature=0.0, max_new_tokens=options.max_new_tokens).model_dump(mode="json")
    request = {"target": target.child_request(), "config": config, "cache_dir": str(paths.run_datasets_cache(run["output_dir"])),
               "perplexity": options.perplexity, "generations": options.generations, "prompts": prompts,
               "prompts_file": prompts_file, "max_prompts": options.max_prompts, "sampling": sampling,
               "max_time_s": max_time_s(), "tasks": options.tasks, "task_path": task_path, "limit": options.limit}
    return target, request


def run_eval(store: Any, run_id: int, options: EvalOptions, progress: Callable[[str], None] = lambda message: None,
             confined: bool = True) -> list[dict[str, Any]]:
    """Evaluate `run_id` and store each result; returns the stored records in order.
    `confined`: user paths must lie in the data roots (an HTTP client's request)."""
    target, request = build_request(store.get_run(run_id), run_id, options, confined)
    try:
        device, env = choose_device(paths.locks_dir(store.path))
    except InferenceError as exc:
        raise EvalRefused(str(exc).replace("chat and serving", "evaluation")) from None
    progress(f"evaluating {target.label} on {device}")
    child = ChildProcess(request, env, module="tunelab.evaluate.child")
    stored: list[dict[str, Any]] = []
    deadline = time.monotonic() + eval_max_time_s()
    try:
        messages = child.watched_messages(
            paths.locks_dir(store.path), device, deadline, DEVICE_POLL_S,
            preempted=lambda holder: EvalRefused(
                f"{holder} started training on {device}; the evaluation was ended to leave the GPU to it"
                + (f" ({len(stored)} result(s) kept)" if stored else "") + ". Run it again when the run has finished"),
            timed_out=lambda: EvalFailed(f"the evaluation took longer than {eval_max_time_s():.0f} s and was ended; "
                                         f"raise {MAX_TIME_ENV}, or ask for fewer prompts or a task limit"),
            ended=lambda code: EvalFailed(f"the eval process ended (exit code {code}) before finishing{child.tail()}"))
        for message in messages:
            kind = message.get("type")
            if kind == "progress":
                progress(str(message.get("message")))
            elif kind == "result":
                payload = {**message["payload"], "step": target.step}
                stored.append(add_eval(store, run_id, message["kind"], payload))
            elif kind == "error":
                field = message.get("field")
                if field:
                    raise EvalInputError(field, str(message.get("message")))
                raise EvalFailed(str(message.get("message")) + child.tail())
            elif kind == "done":
                return stored
    finally:
        child.end()
