"""The MLX backend: the same runs and the same events as the torch backend, trained with MLX.

`run(config, ctx)` is called by `tunelab.worker.entry` inside the spawned worker when the
config's backend is mlx. It loads the model with mlx-lm (an HF-format folder or hub id),
prepares the data with the shared `tunelab.worker.data.prepare` code (so formats, chat templates
and completion masking are identical), adds LoRA/DoRA/rsLoRA adapters or unfreezes every
weight, and trains with `loop.Trainer`, sending `progress` events. A stop ends it at
the next step boundary: with save it writes `checkpoint-<step>` (`checkpoint.py`), with
cancel it saves nothing. Resume restores weights and optimizer state and carries on from
the checkpoint's step. Only the worker process imports this module (and so MLX).
"""

from __future__ import annotations

import math
import os
import resource
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

if sys.platform != "darwin":
    # MLX's CPU build compiles fused kernels with g++ on first use (~34 s per fresh temp
    # folder); measured here, turning that off gives the same losses at the same speed.
    # It must be set before MLX is imported.
    os.environ.setdefault("MLX_DISABLE_COMPILE", "1")

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402

from tunelab import events, paths
from tunelab.config.run_config import DEFAULT_TARGET_MODULES
from tunelab.worker.data import prepare as data
from tunelab.worker.context import RunSettingError, WorkerContext
from tunelab.worker.backends.mlx.checkpoint import (
    CheckpointMismatch,
    load_checkpoint,
    rotate_checkpoints,
    save_checkpoint,
    save_final,
)
from tunelab.worker.backends.mlx.loop import BatchPlan, GradientClips, StepResult, Trainer, make_optimizer, warmup_steps_for

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


def run(config: WorkerConfig, ctx: WorkerContext) -> None:
    output_dir = Path(config.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    ctx.emit(events.make(events.OUTPUT_DIR, output_dir=str(output_dir)))
    seed = config.seed

    ctx.stage("loading_model", f"Loading model {config.model_name} with MLX")
    ctx.emit(events.make(events.MODEL_LOAD_STARTED))
    with _stall_watch(config, ctx):
        model, tokenizer, model_config = _load_model(config)
    ctx.emit(events.make(events.MODEL_LOAD_COMPLETED))
    hf_tokenizer = tokenizer._tokenizer  # the transformers tokenizer inside mlx-lm's wrapper

    ctx.stage("loading_dataset", "Loading the dataset")
    raw = data.load_raw(config, paths.run_datasets_cache(output_dir))
    ctx.stage("formatting", f"Tokenizing {len(raw.train)} {raw.format} rows")
    prepared = data.prepare(config, hf_tokenizer, raw=raw)
    ctx.emit(events.modality("text"))  # this backend trains language models only
    train_rows = _rows(prepared.train)
    eval_rows = _rows(prepared.eval) if prepared.eval is not None else None

    ctx.stage("configuring", _describe_method(config))
    mx.random.seed(seed)  # adapter initialisation draws from MLX's global generator
    adapter_config = _configure_training(model, config)
    plan = BatchPlan(len(train_rows), config.batch_size, config.gradient_accumulation_steps, seed)
    total_steps = plan.total_steps(config.max_steps, config.num_epochs)
    optimizer = make_optimizer(config, total_steps)
    start_step, history, tokens_before = 0, [], 0
    if config.resume_from:
        try:
            state = load_checkpoint(Path(config.resume_from), model, optimizer, adapter_config)
        except CheckpointMismatch as exc:
            raise RunSettingError("resume_from", str(exc)) from exc
        start_step, history, tokens_before = int(state["global_step"]), list(state.get("log_history") or []), int(state.get("num_tokens") or 0)
    eval_every = _eval_interval(config, total_steps) if eval_rows else 0
    if eval_every:
        ctx.emit(events.make(events.EVAL_CONFIGURED, eval_rows=len(eval_rows)))
    trainer = Trainer(model, optimizer, train_rows, eval_rows, plan, _pad_id(hf_tokenizer),
                      GradientClips.from_config(config), seed)
    run_state = _RunState(config, plan, total_steps, output_dir, adapter_config, history, tokens_before,
                          {"lr_scheduler_type": config.lr_scheduler_type,
                           "warmup_steps": warmup_steps_for(config, total_steps), "total_steps": total_steps})

    ctx.stage("training", f"Training from step {start_step}" if start_step else "Training")
    step = run_state.train(ctx, trainer, start_step, eval_every)
    _finish(ctx, run_state, trainer, tokenizer, model_config, step)


def _finish(ctx: WorkerContext, run_state: "_RunState", trainer: Trainer, tokenizer: Any,
            model_config: dict[str, Any], step: int) -> None:
    output_dir = run_state.output_dir
    if ctx.stop == "cancel":
        ctx.complete(None, "cancelled")
        return
    stopped_early = ctx.stop == "save" and step < run_state.total_steps
    ctx.stage("saving", f"Saving checkpoint-{step}" if stopped_early else "Saving the final model")
    checkpoint = run_state.checkpoint(trainer.model, trainer.optimizer, step)
    if stopped_early:
        ctx.complete_stopped(output_dir, step)
        return
    save_final(output_dir, trainer.model, tokenizer, run_state.adapter_config, model_config)
    losses = [row["loss"] for row in run_state.history if "loss" in row]
    final = f"; final loss {losses[-1]:.4f}" if losses and math.isfinite(losses[-1]) else ""
    ctx.complete(str(output_dir), f"completed {step} steps{final}", checkpoint)


class _RunState:
    """Bookkeeping around the trainer: progress events, logging history, periodic saves."""

    def __init__(self, config: WorkerConfig, plan: BatchPlan, total_steps: int, output_dir: Path,
                 adapter_config: dict[str, Any], history: list[dict[str, Any]], tokens_before: int, scheduler: dict[str, Any]):
        self.config = config
        self.plan = plan
        self.total_steps = total_steps
        self.output_dir = output_dir
        self.adapter_config = adapter_config
        self.history = history
        self.num_tokens = tokens_before
        self.scheduler = scheduler

    def train(self, ctx: WorkerContext, trainer: Trainer, start_step: int, eval_every: int) -> int:
        """Train until the last step or a stop; return the step reached."""
        logging_steps = max(1, self.config.logging_steps)
        save_steps = self.config.save_steps
        started, step, pending = time.monotonic(), start_step, []
        for step, result in trainer.steps(start_step + 1, self.total_steps, lambda: ctx.stop is not None):
            self.num_tokens += result.input_tokens
            pending.append(result)
            eval_loss = trainer.evaluate() if eval_every and step % eval_every == 0 else None
            if step % logging_steps == 0 or step == self.total_steps or eval_loss is not None:
                self._report(ctx, step, pending, eval_loss, started, start_step)
                pending = []
            if save_steps and step % save_steps == 0 and step < self.total_steps and ctx.stop is None:
                self.checkpoint(trainer.model, trainer.optimizer, step)
        if pending:  # a stop between logging steps: still report the steps that ran
            self._report(ctx, step, pending, None, started, start_step)
        return step

    def _report(self, ctx: WorkerContext, step: int, results: list[StepResult], eval_loss: float | None,
                started: float, start_step: int) -> None:
        elapsed = time.monotonic() - started
        done = step - start_step
        row = {
            "step": step,
            "epoch": round(self.plan.epoch_of(step), 4),
            # The mean over the steps since the last report, as HF Trainer logs it.
            "loss": sum(r.loss for r in results) / len(results),
            "learning_rate": results[-1].learning_rate,
            "grad_norm": results[-1].grad_norm,
            "eval_loss": eval_loss,
            "num_tokens": self.num_tokens,
        }
        self.history.append({k: v for k, v in row.items() if v is not None})
        ctx.emit(events.progress(
            total_steps=self.total_steps,
            elapsed_seconds=elapsed,
            eta_seconds=elapsed / done * (self.total_steps - step) if done else None,
            peak_memory_gb=_peak_memory_gb(),
            **row,
        ))

    def checkpoint(self, model: nn.Module, optimizer: Any, step: int) -> Path:
        folder = save_checkpoint(
            self.output_dir, step, model, optimizer, self.adapter_config,
            {**self.scheduler, "learning_rate": optimizer.learning_rate.item()},
            {"epoch": self.plan.epoch_of(step), "max_steps": self.total_steps, "num_tokens": self.num_tokens,
             "log_history": self.history, "backend": "mlx"},
        )
        rotate_checkpoints(self.output_dir, self.config.save_total_limit)
        return folder


def _stall_watch(config: WorkerConfig, ctx: WorkerContext) -> Any:
    if Path(config.model_name).expanduser().exists():
        return nullcontext()  # a local folder downloads nothing
    from tunelab.worker.stall import DownloadStallWatch, hub_cache_folders

    # mlx-lm downloads through huggingface_hub into the same cache as transformers.
    return DownloadStallWatch(ctx, hub_cache_folders(config.model_name))


def _describe_method(config: WorkerConfig) -> str:
    method = config.training_type
    extras = [name for name, on in (("dora", config.use_dora), ("rslora", config.use_rslora)) if on]
    device = "Metal GPU" if mx.metal.is_available() else "CPU"
    return f"Setting up {method}{' (' + ', '.join(extras) + ')' if extras else ''} with MLX on {device}"


def _peak_memory_gb() -> float:
    """MLX's peak allocation on a Metal GPU (like CUDA's), else the process's peak resident memory."""
    if mx.metal.is_available():
        return mx.get_peak_memory() / 2**30
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak * (1 if sys.platform == "darwin" else 1024) / 2**30  # bytes on macOS, KiB on Linux


def _load_model(config: WorkerConfig) -> tuple[nn.Module, Any, dict[str, Any]]:
    if config.hf_token:
        # mlx-lm downloads through huggingface_hub, which reads the token from here.
        os.environ["HF_TOKEN"] = config.hf_token
    from mlx_lm import load

    from tunelab import families
    from tunelab.worker.families.model_files import model_files  # torch-free, as MLX runs without torch

    # The start checks catch most; a hub model not yet cached, or a plain encoder, lands here.
    refusal = families.detect(model_files(config)).backend_refusal(config.model_name, "mlx")
    if refusal:
        raise RunSettingError("backend", refusal)
    model, tokenizer, model_config = load(config.model_name, return_config=True,
                                          trust_remote_code=config.trust_remote_code)
    precision = config.precision
    if precision != "auto":
        # "auto" trains in the dtype the weights were saved in, as mlx-lm does.
        model.set_dtype({"fp32": mx.float32, "bf16": mx.bfloat16, "fp16": mx.float16}[precision])
    return model, tokenizer, model_config


def _configure_training(model: nn.Module, config: WorkerConfig) -> dict[str, Any]:
    """Make the right weights trainable; return the adapter description saved with the run."""
    layers = len(model.layers)
    if config.gradient_checkpointing:
        from mlx_lm.tuner.trainer import grad_checkpoint

        grad_checkpoint(model.layers[0])
    if config.training_type not in ("lora", "qlora"):
        model.unfreeze()
        return {"fine_tune_type": "full", "num_layers": layers, "lora_parameters": None, "backend": "mlx",
                "base_model_name_or_path": config.model_name}
    from mlx_lm.tuner.utils import linear_to_lora_layers

    rank, alpha = config.lora_r, config.lora_alpha
    # rsLoRA differs from LoRA only in its scale: alpha / sqrt(r) instead of alpha / r.
    scale = alpha / math.sqrt(rank) if config.use_rslora else alpha / rank
    keys = _lora_keys(model, config.target_modules or list(DEFAULT_TARGET_MODULES), explicit=bool(config.target_modules))
    lora_parameters = {"rank": rank, "scale": scale, "dropout": config.lora_dropout, "keys": keys}
    model.freeze()
    linear_to_lora_layers(model, layers, lora_parameters, use_dora=config.use_dora)
    return {"fine_tune_type": "dora" if config.use_dora else "lora", "num_layers": layers,
            "lora_parameters": lora_parameters, "backend": "mlx", "base_model_name_or_path": config.model_name}


def _lora_keys(model: nn.Module, targets: list[str], explicit: bool) -> list[str]:
    """Paths inside a transformer block (e.g. `self_attn.q_proj`) of the linear layers named
    by `targets`, matched on their last name like PEFT's target_modules."""
    linears = [path for path, module in model.layers[0].named_modules() if isinstance(module, (nn.Linear, nn.QuantizedLinear))]
    keys = sorted(p for p in linears if p.rsplit(".", 1)[-1] in targets)
    if not keys:
        names = sorted({p.rsplit(".", 1)[-1] for p in linears})
        if explicit:
            raise RunSettingError("target_modules", f"none of {targets} is a linear layer of this model; it has {names}")
        keys = linears  # an unfamiliar layout: adapt every linear layer, like PEFT's "all-linear"
    return keys


def _eval_interval(config: WorkerConfig, total_steps: int) -> int:
    """Steps between evaluations: eval_steps >= 1 is a count, < 1 a share of the run."""
    every = config.eval_steps
    if every <= 0:
        return 0
    return max(1, math.ceil(every * total_steps)) if every < 1 else int(every)


def _pad_id(tokenizer: Any) -> int:
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id):
        if candidate is not None:
            return int(candidate)
    return 0  # padded positions carry label -100, so any id is safe


def _rows(dataset: Any) -> list[dict[str, list[int]]]:
    """Plain lists of token ids: indexing them per step is far cheaper than a Dataset."""
    return [{"input_ids": ids, "labels": labels} for ids, labels in zip(dataset["input_ids"], dataset["labels"])]
