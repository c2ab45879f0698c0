"""Cross-field refusals of a run's config that would otherwise crowd its class: the
finetune_* switches that choose the adapted layers, and what the mlx backend cannot do.
Each returns (field, message) pairs, every message saying how to fix it.
"""

from __future__ import annotations

from typing import Any

# Learning-rate schedules the mlx backend implements (the torch backend takes any HF name).
MLX_LR_SCHEDULERS = ("linear", "cosine", "constant", "constant_with_warmup")
FINETUNE_SWITCHES = ("finetune_vision_layers", "finetune_language_layers", "finetune_attention_modules", "finetune_mlp_modules")


def finetune_switch_errors(cfg: Any) -> list[tuple[str, str]]:
    """The finetune_* switches choose the adapted layers; a choice that leaves none, or
    that contradicts an explicit target_modules list, is refused here."""
    errs = []
    if not (cfg.finetune_vision_layers or cfg.finetune_language_layers):
        errs.append(("finetune_language_layers", "finetune_vision_layers and finetune_language_layers are both false, which trains nothing; turn one on"))
    if not (cfg.finetune_attention_modules or cfg.finetune_mlp_modules):
        errs.append(("finetune_mlp_modules", "finetune_attention_modules and finetune_mlp_modules are both false, which trains nothing; turn one on"))
    if cfg.embedding_learning_rate is not None and not cfg.finetune_language_layers:
        errs.append(("embedding_learning_rate", "finetune_language_layers=false freezes the embeddings and output head, so their own learning rate would never apply; remove embedding_learning_rate or turn finetune_language_layers on"))
    off = [name for name in FINETUNE_SWITCHES if not getattr(cfg, name)]
    if cfg.target_modules and off:
        errs.append((off[0], f"target_modules names the adapted modules itself, so {', '.join(off)} would be ignored; remove target_modules or leave the finetune_* switches on"))
    return errs


def mlx_limits(cfg: Any) -> list[tuple[str, str]]:
    """What the mlx backend cannot do, refused here so a run never fails on it mid-way."""
    errs = []
    if cfg.load_in_4bit or cfg.training_type == "qlora":
        errs.append(("training_type", "the mlx backend has no bitsandbytes QLoRA; use training_type=lora or backend=torch"))
    if cfg.use_loftq:
        errs.append(("use_loftq", "LoftQ needs PEFT; it is not available with backend=mlx"))
    if cfg.gpu_ids:
        errs.append(("gpu_ids", "the mlx backend does not select CUDA devices; remove gpu_ids"))
    for name in ("num_gpus", "num_processes", "nodes", "ray_address"):
        if getattr(cfg, name) and not (name == "num_processes" and cfg.num_processes == 1):
            errs.append((name, f"the mlx backend trains in one process; remove {name} or use backend=torch"))
    if cfg.packing:
        errs.append(("packing", "packing is not available with backend=mlx; set packing=false"))
    if cfg.embedding_learning_rate is not None:
        errs.append(("embedding_learning_rate", "the mlx backend trains with one learning rate; remove embedding_learning_rate or use backend=torch"))
    if cfg.report_to != "none":
        errs.append(("report_to", "the mlx backend reports only to tunelab; set report_to=none"))
    if cfg.lr_scheduler_type not in MLX_LR_SCHEDULERS:
        errs.append(("lr_scheduler_type", f"'{cfg.lr_scheduler_type}' is not available with backend=mlx; use one of {list(MLX_LR_SCHEDULERS)}"))
    # Any AdamW flavour maps onto MLX's AdamW; 8-bit and other optimizers have no MLX twin.
    if not cfg.optim.startswith("adamw") or "bit" in cfg.optim:
        errs.append(("optim", f"'{cfg.optim}' is not available with backend=mlx, which trains with AdamW; set optim=adamw_torch"))
    return errs
