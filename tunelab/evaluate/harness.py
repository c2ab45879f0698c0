"""lm-evaluation-harness tasks on the loaded fine-tune, in the eval child.

The harness gets the model the child already loaded (base + adapter switched on, or the
full model) through its Hugging Face backend (`HFLM(pretrained=<model>)`), so nothing is
loaded twice. Tasks come from lm-eval's own registry plus the YAML files under the
user's task folder (`include_path`); the folder is also the working directory while the
tasks load, so a local task's `dataset_kwargs.data_files` may name files beside it.
Offline, only tasks whose data is local can run: a task that reaches for the hub fails
with a message saying so.
"""

from __future__ import annotations

import contextlib
import math
import os
from typing import Any

from tunelab.worker.data.formats import DataFormatError

HUB_HINT = ("if it downloads its data from the Hugging Face hub, it cannot run offline: define a local task "
            "(a YAML file with dataset_path: json and dataset_kwargs.data_files) in a folder and pass it as the task path")


@contextlib.contextmanager
def _working_dir(folder: str | None):
    before = os.getcwd()
    if folder:
        os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _numbers(metrics: dict[str, Any]) -> dict[str, float | None]:
    """A task's metrics as JSON numbers (`acc,none` -> `acc`; NaN and infinities -> None)."""
    out: dict[str, float | None] = {}
    for name, value in metrics.items():
        if name in ("alias", "sample_len") or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        key = name.removesuffix(",none")
        out[key] = float(value) if math.isfinite(value) else None
    return out


def _task_manager(manager_class: Any, tasks: list[str], task_path: str | None) -> Any:
    """The user's folder alone when it holds every task asked for: indexing lm-eval's own
    thousands of task files takes many seconds, and a local task needs none of them."""
    if task_path:
        local = manager_class(include_path=task_path, include_defaults=False)
        if all(task in local.all_tasks for task in tasks):
            return local
        return manager_class(include_path=task_path)
    return manager_class()


def find_tasks(tasks: list[str], task_path: str | None) -> Any:
    """lm-eval's task manager holding every task asked for; a field error names the missing ones."""
    from lm_eval.tasks import TaskManager

    manager = _task_manager(TaskManager, tasks, task_path)
    unknown = [task for task in tasks if task not in manager.all_tasks]
    if unknown:
        where = f"lm-eval's tasks or the YAML tasks under {task_path}" if task_path else "lm-eval's tasks (pass a task path for local ones)"
        raise DataFormatError("tasks", f"unknown task(s) {', '.join(unknown)}: not among {where}")
    return manager


def run_tasks(loaded: Any, manager: Any, tasks: list[str], task_path: str | None, limit: int | None) -> dict[str, Any]:
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM

    model = HFLM(pretrained=loaded.model, tokenizer=loaded.tokenizer, batch_size=4, device=loaded.device)
    try:
        with _working_dir(task_path):
            results = simple_evaluate(model=model, tasks=tasks, task_manager=manager, limit=limit, log_samples=False,
                                      bootstrap_iters=0, verbosity="ERROR")
    except DataFormatError:
        raise
    except Exception as exc:  # noqa: BLE001 - the harness raises many types for a task it cannot load
        raise DataFormatError("tasks", f"lm-eval could not run {', '.join(tasks)}: {type(exc).__name__}: {exc}; {HUB_HINT}") from exc
    scores = {task: _numbers(metrics) for task, metrics in (results or {}).get("results", {}).items()}
    samples = {task: int(count.get("effective", count.get("original", 0)))
               for task, count in (results or {}).get("n-samples", {}).items() if isinstance(count, dict)}
    return {"tasks": tasks, "scores": scores, "samples": samples, "limit": limit}
