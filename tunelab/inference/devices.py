"""Where an inference child may run: never on a GPU a training run on this home holds.

A training run holds a lock per device (`orchestrator.ownership`). An inference child
gets the GPU with the most free memory that no run holds, pinned by CUDA_VISIBLE_DEVICES;
when every GPU is held it is refused (`DeviceBusy`), and a machine without GPUs runs it
on the CPU — beside a CPU training run if there is one, sharing the cores. Torch-free.
"""

from __future__ import annotations

from pathlib import Path

from tunelab import hardware
from tunelab.inference.target import InferenceError
from tunelab.orchestrator.ownership import device_holder

CPU = "cpu"


class DeviceBusy(InferenceError):
    """Every GPU is held by a training run (HTTP 409, CLI exit 1)."""


def _holder_text(holder: dict) -> str:
    run_id, pid = holder.get("run_id"), holder.get("pid")
    who = f"run {run_id}" if run_id is not None else "a run that is starting"
    return who + (f" (process {pid})" if pid else "")


def choose_device(locks_dir: Path, gpus: list[hardware.Gpu] | None = None) -> tuple[str, dict[str, str]]:
    """(device name, environment for the child): `gpu-<pin>` or `cpu`."""
    gpus = hardware.list_gpus() if gpus is None else gpus
    if not gpus:
        # Hidden explicitly, so no library in the child reaches for a device after all.
        return CPU, {"CUDA_VISIBLE_DEVICES": ""}
    holders = {gpu.pin: device_holder(locks_dir, f"gpu-{gpu.pin}") for gpu in gpus}
    free = [gpu for gpu in gpus if holders[gpu.pin] is None]
    if not free:
        busy = "; ".join(f"GPU {gpu.index}: {_holder_text(holders[gpu.pin])}" for gpu in gpus)
        raise DeviceBusy(f"every GPU is training ({busy}); chat and serving would take memory the run needs. "
                         "Try again when the run has finished, or stop it")
    best = sorted(free, key=lambda gpu: (-(gpu.free_mb or 0), gpu.index))[0]
    return f"gpu-{best.pin}", {"CUDA_VISIBLE_DEVICES": best.pin, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def training_on(locks_dir: Path, device: str) -> str | None:
    """Who trains on `device` now (for a message), or None; the CPU is shared, never claimed."""
    if device == CPU:
        return None
    holder = device_holder(locks_dir, device)
    return _holder_text(holder) if holder is not None else None
