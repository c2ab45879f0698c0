"""Cross-field refusals of a run's config that would otherwise crowd its class: the
finetune_* switches that choose the adapted layers, what the mlx backend cannot do, and
several GPUs asked for where some are MIG slices. Each returns (field, message) pairs,
every message saying how to fix it. `check_machine` raises them all for this machine.
"""

from __future__ import annotations

from typing import Any, Collection

from tunelab.config.errors import ConfigError, FieldError

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


def mig_slice_errors(cfg: Any, cuda_device_count: int, mig_slices: Collection[int]) -> list[tuple[str, str]]:
    """A run trains one process per GPU, and CUDA shows a process only one MIG slice, so a
    run that would need several devices of which one is a slice could never start its
    ranks: refused up front. `mig_slices`: the CUDA ids (as gpu_ids counts) that are slices.
    A `num_gpus` run is placed on whole GPUs only (orchestrator/gpus.py), so it is refused
    when there are not enough of them."""
    if not mig_slices:
        return []
    why = "CUDA shows a process only one MIG slice, and a run trains one process per device"
    slices = sorted(set(cfg.gpu_ids or ()) & set(mig_slices))
    if cfg.gpu_ids and len(cfg.gpu_ids) > 1 and slices:
        return [("gpu_ids", f"GPU ids {slices} are MIG slices: {why}; give gpu_ids a single slice (start one run per "
                            f"slice) or only whole GPUs")]
    whole = cuda_device_count - len(set(mig_slices))
    if cfg.num_gpus and cfg.num_gpus > 1 and cfg.num_gpus > whole:
        return [("num_gpus", f"num_gpus={cfg.num_gpus} needs {cfg.num_gpus} whole GPUs and this machine has {whole} "
                             f"(besides {len(set(mig_slices))} MIG slices): {why}; lower num_gpus, or start one run per slice")]
    return []


def check_machine(cfg: Any, cuda_device_count: int, mig_slices: Collection[int] = ()) -> None:
    """Checks that depend on this machine's hardware (done at start, not at parse), every
    problem reported at once; `mig_slices`: which of the CUDA ids are MIG slices."""
    if cfg.resolved_backend != "torch":
        return
    errs: list[tuple[str, str]] = []
    if cfg.nodes is not None and cfg.nodes.node_rank > 0:
        errs.append(("nodes.node_rank", f"node {cfg.nodes.node_rank} only trains; the head (node_rank 0) records the run. "
                                        f"On this machine run `tunelab train CONFIG --node-rank {cfg.nodes.node_rank}`, and start the run here with node_rank 0"))
    if cfg.load_in_4bit and cuda_device_count == 0:
        field = "training_type" if cfg.training_type == "qlora" else "load_in_4bit"
        errs.append((field, "4-bit loading (QLoRA) needs a CUDA GPU and this machine has none; use training_type=lora with load_in_4bit=false"))
    if cfg.gpu_ids:
        bad = [g for g in cfg.gpu_ids if not 0 <= g < cuda_device_count]
        if bad:
            have = f"ids 0..{cuda_device_count - 1}" if cuda_device_count else "no CUDA GPUs"
            errs.append(("gpu_ids", f"GPU ids {bad} do not exist (this machine has {have}); fix gpu_ids or remove it for automatic choice"))
    if cfg.num_gpus and cfg.num_gpus > cuda_device_count:
        have = f"{cuda_device_count}" if cuda_device_count else "no CUDA GPUs; use num_processes for several CPU processes"
        errs.append(("num_gpus", f"num_gpus={cfg.num_gpus} but this machine has {have}; lower num_gpus"))
    errs.extend(mig_slice_errors(cfg, cuda_device_count, mig_slices))
    gpus = len(cfg.gpu_ids or []) or cfg.num_gpus or 0
    if gpus and cfg.num_processes and cfg.num_processes != gpus:
        errs.append(("num_processes", f"a run trains one process per GPU: {gpus} GPUs need num_processes={gpus} (or leave num_processes out)"))
    if errs:
        raise ConfigError([FieldError(field=f, message=m) for f, m in errs])
