"""From a run config to the Trainer's arguments (shared by every method; TRL's `SFTConfig`
for the text and vision families), and the environment the tracking services read.

Saving is always step-based so every run ends with a resumable `checkpoint-<last step>`:
`save_steps` > 0 also saves every N steps, 0 saves only at the end. `eval_steps` keeps
its config meaning (0 = never, >= 1 every N steps, < 1 a fraction of the total, which
the Trainer resolves once it knows the total). Logging never filters NaN/inf losses: the
parent must see a broken loss as broken, not as the average of the good ones.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunelab.layout import dist_timeout_s, strategy_for
from tunelab.worker.model_setup import DeviceSettings, SetupError

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

# "Save only at the end": a save interval no run reaches, plus the Trainer's final save.
NEVER_BY_INTERVAL = 10**9
TRACKER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}


def configure_tracking(config: WorkerConfig, output_dir: Path) -> str:
    """Set the environment the chosen tracker reads and return the Trainer's `report_to`."""
    target = config.report_to
    if target == "none":
        return "none"
    package = TRACKER_PACKAGES[target]
    if importlib.util.find_spec(package) is None:
        raise SetupError("report_to", f"report_to={target} needs the '{package}' package; install it (pip install {package}) or set report_to=none")
    if target == "tensorboard":
        os.environ["TENSORBOARD_LOGGING_DIR"] = str(Path(config.tensorboard_dir or output_dir / "tensorboard").expanduser())
    elif target == "wandb":
        os.environ["WANDB_PROJECT"] = config.wandb_project  # RunConfig names it "tunelab" where it was left out
        os.environ["WANDB_DIR"] = str(output_dir)
        if config.wandb_token:
            os.environ["WANDB_API_KEY"] = config.wandb_token
        else:
            # Without an account key wandb would prompt for one; offline mode logs locally instead.
            os.environ["WANDB_MODE"] = "offline"
    elif target == "mlflow":
        if config.mlflow_tracking_uri:
            os.environ["MLFLOW_TRACKING_URI"] = config.mlflow_tracking_uri
        if config.mlflow_experiment:
            os.environ["MLFLOW_EXPERIMENT_NAME"] = config.mlflow_experiment
    return target


def _warmup(config: WorkerConfig) -> float:
    # transformers 5 takes a ratio as a float below 1 in `warmup_steps`.
    if config.warmup_steps is not None:
        return int(config.warmup_steps)
    return float(config.warmup_ratio or 0.0)


def _eval_settings(config: WorkerConfig, has_eval: bool) -> dict[str, Any]:
    every = config.eval_steps
    if not has_eval or every <= 0:
        return {"eval_strategy": "no"}
    return {"eval_strategy": "steps", "eval_steps": every if every < 1 else int(every)}


def training_arguments(config: WorkerConfig, device: DeviceSettings, output_dir: Path, has_eval: bool) -> dict[str, Any]:
    """The Trainer arguments every method shares (transformers' `TrainingArguments`
    fields): schedule, batch, precision, logging, saving, eval and parallelism. Each
    method adds its own on top (TRL's sequence settings, sentence-transformers' sampler)."""
    report_to = configure_tracking(config, output_dir)
    save_every = config.save_steps
    parallel = parallel_settings(config, checkpointing=device.gradient_checkpointing)
    # Under FSDP, checkpointing is FSDP's own (in its fsdp_config); the Trainer's would add
    # a redundant all-gather of every layer's weights to every backward.
    trainer_checkpointing = device.gradient_checkpointing and "fsdp" not in parallel
    return dict(
        output_dir=str(output_dir),
        run_name=config.display_name or output_dir.name,
        max_steps=config.max_steps or -1,
        num_train_epochs=config.num_epochs,
        per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=config.batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        learning_rate=config.learning_rate,
        weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm,
        lr_scheduler_type=config.lr_scheduler_type,
        warmup_steps=_warmup(config),
        optim=config.optim,
        seed=config.seed,
        bf16=device.precision == "bf16",
        fp16=device.precision == "fp16",
        activation_checkpointing=trainer_checkpointing,
        activation_checkpointing_kwargs={"use_reentrant": False} if trainer_checkpointing else None,
        logging_strategy="steps",
        logging_steps=config.logging_steps,
        logging_nan_inf_filter=False,
        save_strategy="steps",
        save_steps=save_every or NEVER_BY_INTERVAL,
        save_total_limit=config.save_total_limit,
        **_eval_settings(config, has_eval),
        report_to=report_to,
        disable_tqdm=True,
        log_level="error",
        dataloader_num_workers=0,
        use_cpu=not device.cuda,
        **parallel,
        **collective_settings(),
    )


def build_sft_config(config: WorkerConfig, device: DeviceSettings, output_dir: Path, has_eval: bool) -> Any:
    from trl import SFTConfig

    return SFTConfig(
        **training_arguments(config, device, output_dir, has_eval),
        max_length=config.max_seq_length,
        packing=config.packing,
        include_num_input_tokens_seen="no",  # counted by TokenCountingSFTTrainer, without a sync per step
    )


def parallel_settings(config: WorkerConfig, *, checkpointing: bool) -> dict[str, Any]:
    """How the Trainer spreads a multi-rank run: DDP, or FSDP2 with whole weights gathered
    for each save (a checkpoint any world size, and export, can read) and, with
    `checkpointing`, FSDP's own activation checkpointing of each wrapped layer."""
    strategy = strategy_for(config.model_dump(), int(os.environ.get("WORLD_SIZE") or 1))  # layout reads mappings (stored configs too)
    if strategy == "ddp":
        # Every adapted parameter takes part in every step; the search for unused ones
        # costs a graph walk per step.
        return {"ddp_find_unused_parameters": False}
    if strategy == "fsdp":
        return {"fsdp": "full_shard auto_wrap",
                "fsdp_config": {"version": 2, "state_dict_type": "FULL_STATE_DICT", "reshard_after_forward": True,
                                "activation_checkpointing": checkpointing}}
    return {}


def collective_settings() -> dict[str, Any]:
    """A multi-rank run's bound on waiting for a peer in a collective
    (TUNELAB_DIST_TIMEOUT_S, layout.dist_timeout_s), for the process group the Trainer
    creates: a dead or frozen node then fails the run within it."""
    if int(os.environ.get("WORLD_SIZE") or 1) <= 1:
        return {}
    return {"ddp_timeout": dist_timeout_s(os.environ)}
