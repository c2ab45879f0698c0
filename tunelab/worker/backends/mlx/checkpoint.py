"""Checkpoints and final outputs of the MLX backend, in the layout `tunelab.checkpoints` accepts.

`output_dir/checkpoint-N/` holds:
  adapters.safetensors   trainable adapter weights (LoRA/DoRA), or
  model.safetensors      every weight (full fine-tuning, continued pretraining)
  adapter_config.json    the adapter's shape in mlx-lm's format, for `mlx_lm.load(..., adapter_path=)`
                         (adapter runs only: transformers takes any folder holding one for a PEFT adapter)
  optimizer.safetensors  AdamW state (`tree_flatten(optimizer.state)`, step count included)
  scheduler.json         step and learning rate, plus the schedule's settings
  trainer_state.json     global_step == N, epoch, token count, logged history and the
                         adapter settings (`mlx_adapter`) that a resume must match
It is written into `tmp-checkpoint-N/` first and renamed, so a folder named
`checkpoint-N` is always complete. Nothing here holds a secret.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
from mlx.utils import tree_flatten, tree_unflatten

from tunelab import paths

ADAPTER_WEIGHTS = "adapters.safetensors"
FULL_WEIGHTS = "model.safetensors"
OPTIMIZER_STATE = "optimizer.safetensors"
SCHEDULER_STATE = "scheduler.json"
TRAINER_STATE = "trainer_state.json"
ADAPTER_CONFIG = "adapter_config.json"


def trained_weights(model: nn.Module, adapter_config: dict[str, Any]) -> tuple[str, dict[str, mx.array]]:
    """The weights file name and tensors that capture what training changed."""
    if adapter_config["fine_tune_type"] == "full":
        return FULL_WEIGHTS, dict(tree_flatten(model.parameters()))
    return ADAPTER_WEIGHTS, dict(tree_flatten(model.trainable_parameters()))


def save_checkpoint(output_dir: Path, step: int, model: nn.Module, optimizer: optim.Optimizer,
                    adapter_config: dict[str, Any], scheduler: dict[str, Any], trainer_state: dict[str, Any]) -> Path:
    """Write checkpoint-`step` atomically and return its path (an existing one is kept)."""
    final = output_dir / f"checkpoint-{step}"
    if final.exists():
        return final
    tmp = output_dir / f"tmp-checkpoint-{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    name, weights = trained_weights(model, adapter_config)
    mx.save_safetensors(str(tmp / name), weights, metadata={"format": "mlx"})
    mx.save_safetensors(str(tmp / OPTIMIZER_STATE), dict(tree_flatten(optimizer.state)))
    _write_adapter_config(tmp, adapter_config)
    _write_json(tmp / SCHEDULER_STATE, {"step": step, **scheduler})
    _write_json(tmp / TRAINER_STATE, {**trainer_state, "global_step": step, "mlx_adapter": adapter_config})
    tmp.rename(final)
    return final


def rotate_checkpoints(output_dir: Path, keep: int | None) -> None:
    """Delete the oldest checkpoint-N folders beyond `keep` (HF's save_total_limit)."""
    if not keep:
        return
    found = sorted((int(p.name.split("-")[1]), p) for p in output_dir.glob("checkpoint-*") if p.name.split("-")[1].isdigit())
    for _, folder in found[:-keep]:
        paths.remove_inside(folder, output_dir)


class CheckpointMismatch(ValueError):
    """A checkpoint that this run's settings cannot continue from."""


def load_checkpoint(folder: Path, model: nn.Module, optimizer: optim.Optimizer, adapter_config: dict[str, Any]) -> dict[str, Any]:
    """Restore weights and optimizer state from `folder`; return its trainer state."""
    if (folder / "optimizer.pt").exists() or not (folder / OPTIMIZER_STATE).exists():
        raise CheckpointMismatch(f"{folder} was not written by the mlx backend (no {OPTIMIZER_STATE}); resume it with backend=torch")
    state = json.loads((folder / TRAINER_STATE).read_text())
    saved = state.get("mlx_adapter") or {}
    for key in ("fine_tune_type", "lora_parameters"):
        if saved.get(key) != adapter_config.get(key):
            raise CheckpointMismatch(
                f"the checkpoint was trained with {key}={saved.get(key)!r} but this run asks for {adapter_config.get(key)!r}; "
                "resume with the settings of the original run (training_type, use_dora, lora_r, lora_alpha, lora_dropout, target_modules)"
            )
    name, expected = trained_weights(model, adapter_config)
    weights = mx.load(str(folder / name))
    wrong = sorted(k for k, v in weights.items() if k not in expected or v.shape != expected[k].shape)
    missing = sorted(set(expected) - set(weights))
    if wrong or missing:
        raise CheckpointMismatch(f"{folder / name} does not fit this model (unexpected: {wrong[:3]}, missing: {missing[:3]}); resume with the original model_name")
    model.load_weights(list(weights.items()), strict=False)
    optimizer.state = tree_unflatten(list(mx.load(str(folder / OPTIMIZER_STATE)).items()))
    mx.eval(model.parameters(), optimizer.state)
    return state


def save_final(output_dir: Path, model: nn.Module, tokenizer: Any, adapter_config: dict[str, Any], model_config: dict[str, Any]) -> None:
    """The run's result in `output_dir` itself: adapter (+config) or a complete model folder,
    with the tokenizer, so `mlx_lm.load` (and transformers, for full weights) can open it."""
    from mlx_lm.utils import save_config, save_model

    if adapter_config["fine_tune_type"] == "full":
        save_model(output_dir, model)
        save_config(dict(model_config), output_dir / "config.json")
    else:
        name, weights = trained_weights(model, adapter_config)
        mx.save_safetensors(str(output_dir / name), weights, metadata={"format": "mlx"})
    _write_adapter_config(output_dir, adapter_config)
    tokenizer.save_pretrained(str(output_dir))


def _write_adapter_config(folder: Path, adapter_config: dict[str, Any]) -> None:
    if adapter_config["fine_tune_type"] != "full":
        _write_json(folder / ADAPTER_CONFIG, adapter_config)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2))
