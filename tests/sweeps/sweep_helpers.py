"""Helpers for the sweep tests: a sweep file over the scripted evaluating worker, and the
environment that makes `tunelab sweep` use it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
TUNELAB = [sys.executable, "-m", "tunelab.cli.main"]


def sweep_data(**overrides: Any) -> dict[str, Any]:
    """4 trials over learning rate and rank, eval every step on a held-out split, a median
    pruner that may prune once one trial has finished."""
    data = {
        "name": "lr-rank",
        "base": {"model_name": "scripted/tiny", "local_datasets": ["/nowhere/train.jsonl"], "max_steps": 6,
                 "eval_steps": 1, "eval_holdout": 0.2},
        "space": {"learning_rate": {"log_uniform": [1e-5, 1e-3]}, "lora_r": {"choice": [8, 16, 32]}},
        "trials": 4,
        "pruner": "median",
        "pruner_startup_trials": 1,
        "seed": 3,
    }
    data.update(overrides)
    return data


def write_sweep(path: Path, **overrides: Any) -> Path:
    path.write_text(yaml.safe_dump(sweep_data(**overrides)))
    return path


def sweep_env(home: Path, step_seconds: float) -> dict[str, str]:
    python_path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "TUNELAB_HOME": str(home), "COLUMNS": "160", "PYTHONPATH": python_path,
            "TUNELAB_WORKER_TARGET": "sweep_workers:evaluating_trainer", "TUNELAB_PREWARM": "0",
            "SCRIPTED_STEP_SECONDS": str(step_seconds)}
