"""The memory check of a start: the run's estimate against the devices it was given.

Runs in the parent after the GPUs are chosen and before the run's row exists, so a
refused run leaves nothing behind. The budget comes from `hardware` (each chosen GPU's
free memory) or, without GPUs, from psutil (the machine's RAM); the decision is
memory/fit.py's. A model whose config.json cannot be read here (a hub id not in the
local cache, an unusual architecture) is not checked: the start goes on, and the log
says why. A Ray cluster's or the mlx backend's devices are not this machine's to measure.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tunelab import hardware
from tunelab.config.run_config import RunConfig

if TYPE_CHECKING:
    from tunelab.memory.fit import Budget

log = logging.getLogger("tunelab.orchestrator")


def budget_for(chosen: list[hardware.Gpu], processes: int) -> Budget | None:
    """One device's budget: the least free GPU among `chosen`, else this machine's RAM
    shared by `processes` CPU processes; None when a GPU's free memory is unknown (MIG)."""
    # Imported at the first start, not with the orchestrator: a server's start-up does not need them.
    import psutil

    from tunelab.memory.fit import Budget

    if chosen:
        if any(g.free_mb is None for g in chosen):
            return None
        tightest = min(chosen, key=lambda g: g.free_mb or 0)
        return Budget(cuda=True, free_bytes=(tightest.free_mb or 0) * 2**20, limit_bytes=(tightest.free_mb or 0) * 2**20,
                      where=f"GPU {tightest.index} ({tightest.name})")
    ram = psutil.virtual_memory()
    whole = ram.total + psutil.swap_memory().total
    share = max(1, processes)
    where = "this machine's RAM" if share == 1 else f"this machine's RAM shared by {share} processes"
    return Budget(cuda=False, free_bytes=ram.available // share, limit_bytes=whole // share, where=where)


def fit_memory(cfg: RunConfig, chosen: list[hardware.Gpu], world_size: int, processes: int) -> tuple[RunConfig, tuple[str, ...]]:
    """The config the run starts with (changed only by memory_fit=auto or an auto
    checkpointing setting: off on a GPU where the run fits without it, on where it needs
    it) and the notes for its events; ConfigError when it cannot fit."""
    if cfg.memory_fit == "off" or cfg.resolved_backend != "torch" or cfg.ray_address:
        return cfg, ()
    from tunelab.memory.fit import check_fit, checkpointing_off
    from tunelab.memory.plan import EstimateUnavailable, read_model_config, settings_for, shape_from_config

    try:
        shape = shape_from_config(read_model_config(cfg.model_name))
    except EstimateUnavailable as exc:
        log.info("memory check skipped: %s", exc)
        return cfg, ()
    budget = budget_for(chosen, processes)
    if budget is None:
        log.info("memory check skipped: a chosen GPU does not report its free memory")
        return cfg, ()
    settings = settings_for(cfg, cuda=budget.cuda, world_size=world_size)
    fit = checkpointing_off(cfg, shape, settings, budget) or check_fit(cfg, shape, settings, budget)
    for note in fit.notes:
        log.warning("%s", note)
    log.info("memory estimate %.2f GiB per device (%s)", fit.estimate.total_bytes / 2**30,
             ", ".join(f"{t.name} {t.bytes / 2**30:.2f}" for t in fit.estimate.terms))
    return (cfg.model_copy(update=fit.changes) if fit.changes else cfg), fit.notes
