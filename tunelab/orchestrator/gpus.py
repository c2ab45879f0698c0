"""Which GPUs a run gets, expressed as the child's CUDA_VISIBLE_DEVICES (each device's
`pin`: a physical number in PCI bus order, or a MIG UUID) and CUDA_DEVICE_ORDER=PCI_BUS_ID.

Explicit `gpu_ids` are used as given (they were checked against the machine before
anything else happened). Otherwise the `num_gpus` GPUs (default one) with the most free
memory are chosen — whole GPUs only when there are several, as a process sees only one
MIG slice — measured after the `before_spawn` hook, which may just have freed some. A machine
without GPUs, a run on a Ray cluster, or the mlx backend, gets no CUDA_VISIBLE_DEVICES at all.
"""

from __future__ import annotations

import logging

from tunelab import hardware
from tunelab.config.run_config import RunConfig

log = logging.getLogger("tunelab.orchestrator")


def choose_gpus(cfg: RunConfig, gpus: list[hardware.Gpu]) -> list[hardware.Gpu]:
    if cfg.resolved_backend != "torch" or not gpus or getattr(cfg, "ray_address", None):
        return []  # on a Ray cluster Ray places the workers and picks their GPUs
    if cfg.gpu_ids:
        by_index = {g.index: g for g in gpus}
        return [by_index[i] for i in cfg.gpu_ids if i in by_index]
    if (cfg.num_gpus or 1) > 1:
        gpus = [g for g in gpus if not g.is_mig]  # a process sees one MIG slice: several are never a run's
    freest = sorted(gpus, key=lambda g: (-(g.free_mb or 0), g.index))
    return freest[: cfg.num_gpus or 1]


def gpu_env(cfg: RunConfig, chosen: list[hardware.Gpu] | None = None) -> dict[str, str]:
    """The environment variables that pin the child to its chosen GPUs (chosen now unless given)."""
    chosen = choose_gpus(cfg, hardware.list_gpus()) if chosen is None else chosen
    if chosen:
        log.info("run uses GPU %s", ", ".join(f"{g.index} ({g.name}, {g.free_mb} MiB free)" for g in chosen))
    return _pinning(chosen)


def auto_gpu_env() -> dict[str, str]:
    """The environment a run without `gpu_ids` on the default backend would get now
    (what a prewarmed worker is started with)."""
    gpus = hardware.list_gpus()
    cfg = RunConfig.model_construct(backend="auto", gpu_ids=None, num_gpus=None)
    return _pinning(choose_gpus(cfg, gpus))


def _pinning(chosen: list[hardware.Gpu]) -> dict[str, str]:
    if not chosen:
        return {}
    # Physical ids or UUIDs: the child must not depend on the parent's own
    # CUDA_VISIBLE_DEVICES, and a number means the same GPU to it only in PCI bus order.
    return {"CUDA_VISIBLE_DEVICES": ",".join(g.pin for g in chosen), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
