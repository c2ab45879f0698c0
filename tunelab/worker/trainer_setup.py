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
from typing import Any

from tunelab.layout import dist_timeout_s, strategy_for
from tunelab.worker.model_setup import DeviceSettings, SetupError

# "Save only at the end": a save interval no run reaches, plus the Trainer's final save.
NEVER_BY_INTERVAL = 10**9
DEFAULT_SEED = 3407  # RunConfig's default, for payloads that carry seed=None
TRACKER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}


def seed_of(config: dict[str, Any]) -> int:
    return int(DEFAULT_SEED if config.get("seed") is None else config["seed"])


def configure_tracking(config: dict[str, Any], output_dir: Path) -> str:
    """Set the environment the chosen tracker reads and return the Trainer's `report_to`."""
    target = config.get("report_to") or "none"
    if target == "none":
        return "none"
    package = TRACKER_PACKAGES[target]
    if importlib.util.find_spec(package) is None:
        raise SetupError("report_to", f"report_to={target} needs the '{package}' package; install it (pip install {package}) or set report_to=none")
    if target == "tensorboard":
        os.environ["TENSORBOARD_LOGGING_DIR"] = str(Path(config.get("tensorboard_dir") or output_dir / "tensorboard").expanduser())
    elif target == "wandb":
        os.environ["WANDB_PROJECT"] = config.get("wandb_project") or "tunelab"
        os.environ["WANDB_DIR"] = str(output_dir)
        if config.get("wandb_token"):
            os.environ["WANDB_API_KEY"] = config["wandb_token"]
        else:
            # Without an account key wandb would prompt for one; offline mode logs locally instead.
            os.environ["WANDB_MODE"] = "offline"
    elif target == "mlflow":
        if config.get("mlflow_tracking_uri"):
            os.environ["MLFLOW_TRACKING_URI"] = config["mlflow_tracking_uri"]
        if config.get("mlflow_experiment"):
            os.environ["MLFLOW_EXPERIMENT_NAME"] = config["mlflow_experiment"]
    return target


def _warmup(config: dict[str, Any]) -> float:
    # transformers 5 takes a ratio as a float below 1 in `warmup_steps`.
    if config.get("warmup_steps") is not None:
        return int(config["warmup_steps"])
    return float(config.get("warmup_ratio") or 0.0)


def _eval_settings(config: dict[str, Any], has_eval: bool) -> dict[str, Any]:
    every = float(config.get("eval_steps") or 0)
    if not has_eval or every <= 0:
        return {"eval_strategy": "no"}
    return {"eval_strategy": "steps", "eval_steps": every if every < 1 else int(every)}


def training_arguments(config: dict[str, Any], device: DeviceSettings, output_dir: Path, has_eval: bool) -> dict[str, Any]:
    """The Trainer arguments every method shares (transformers' `TrainingArguments`
    fields): schedule, batch, precision, logging, saving, eval and parallelism. Each
    method adds its own on top (TRL's sequence settings, sentence-transformers' sampler)."""
    report_to = configure_tracking(config, output_dir)
    save_every = int(config.get("save_steps") or 0)
    parallel = parallel_settings(config, checkpointing=device.gradient_checkpointing)
    # Under FSDP, checkpointing is FSDP's own (in its fsdp_config); the Trainer's would add
    # a redundant all-gather of every layer's weights to every backward.
    trainer_checkpointing = device.gradient_checkpointing and "fsdp" not in parallel
    return dict(
        output_dir=str(output_dir),
        run_name=config.get("display_name") or output_dir.name,
        max_steps=int(config.get("max_steps") or 0) or -1,
        num_train_epochs=float(config.get("num_epochs") or 0),
        per_device_train_batch_size=int(config.get("batch_size") or 2),
        per_device_eval_batch_size=int(config.get("batch_size") or 2),
        gradient_accumulation_steps=int(config.get("gradient_accumulation_steps") or 1),
        learning_rate=float(config["learning_rate"]),
        weight_decay=float(config.get("weight_decay") or 0.0),
        max_grad_norm=float(config.get("max_grad_norm") or 0.0),
        lr_scheduler_type=config.get("lr_scheduler_type") or "linear",
        warmup_steps=_warmup(config),
        optim=config.get("optim") or "adamw_torch_fused",
        seed=seed_of(config),
        bf16=device.precision == "bf16",
        fp16=device.precision == "fp16",
        activation_checkpointing=trainer_checkpointing,
        activation_checkpointing_kwargs={"use_reentrant": False} if trainer_checkpointing else None,
        logging_strategy="steps",
        logging_steps=int(config.get("logging_steps") or 1),
        logging_nan_inf_filter=False,
        save_strategy="steps",
        save_steps=save_every or NEVER_BY_INTERVAL,
        save_total_limit=config.get("save_total_limit"),
        **_eval_settings(config, has_eval),
        report_to=report_to,
        disable_tqdm=True,
        log_level="error",
        dataloader_num_workers=0,
        use_cpu=not device.cuda,
        **parallel,
        **collective_settings(),
    )


def build_sft_config(config: dict[str, Any], device: DeviceSettings, output_dir: Path, has_eval: bool) -> Any:
    from trl import SFTConfig

    return SFTConfig(
        **training_arguments(config, device, output_dir, has_eval),
        max_length=int(config.get("max_seq_length") or 2048),
        packing=bool(config.get("packing")),
        include_num_input_tokens_seen="no",  # counted by TokenCountingSFTTrainer, without a sync per step
    )


def parallel_settings(config: dict[str, Any], *, checkpointing: bool) -> dict[str, Any]:
    """How the Trainer spreads a multi-rank run: DDP, or FSDP2 with whole weights gathered
    for each save (a checkpoint any world size, and export, can read) and, with
    `checkpointing`, FSDP's own activation checkpointing of each wrapped layer."""
    strategy = strategy_for(config, int(os.environ.get("WORLD_SIZE") or 1))
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
