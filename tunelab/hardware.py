"""Which CUDA GPUs this machine has and how much memory each has free — without torch.

The server must never import torch, so GPUs are listed by asking `nvidia-smi`. No
`nvidia-smi` (or one that fails) means no GPUs. When the server itself runs with
`CUDA_VISIBLE_DEVICES` set, only those devices are listed, numbered 0..n-1 in the order
given — the same numbering CUDA (and therefore `gpu_ids`) uses inside the process.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass

log = logging.getLogger("tunelab.hardware")

QUERY = "index,uuid,memory.total,memory.free,name"
NVIDIA_SMI_TIMEOUT_S = 10


@dataclass(frozen=True)
class Gpu:
    """One CUDA device as the training process will see it."""

    index: int  # the CUDA ordinal inside a process that inherits our CUDA_VISIBLE_DEVICES
    physical_index: int  # nvidia-smi's index: what a child's CUDA_VISIBLE_DEVICES names
    uuid: str
    name: str
    total_mb: int | None  # None where nvidia-smi reports [N/A]
    free_mb: int | None


def _mib(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:
        return None


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Rows of `nvidia-smi --query-gpu=<QUERY> --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        # The name comes last and is the only column that could hold a comma.
        parts = [p.strip() for p in line.split(",", 4)]
        if len(parts) != 5 or not parts[0].isdigit():
            log.warning("ignoring an nvidia-smi line that is not index,uuid,total,free,name: %r", line)
            continue
        physical, uuid, total, free, name = parts
        gpus.append(Gpu(index=int(physical), physical_index=int(physical), uuid=uuid, name=name,
                        total_mb=_mib(total), free_mb=_mib(free)))
    return gpus


def _apply_visible_devices(gpus: list[Gpu], visible: str | None) -> list[Gpu]:
    """Keep only the devices CUDA_VISIBLE_DEVICES exposes, renumbered like CUDA does.

    Entries are ordinals or (prefixes of) UUIDs; CUDA stops at the first entry it cannot
    match, and so do we."""
    if visible is None:
        return gpus
    chosen: list[Gpu] = []
    for entry in (e.strip() for e in visible.split(",")):
        match = None
        if entry.lstrip("-").isdigit():
            match = next((g for g in gpus if g.physical_index == int(entry)), None)
        elif entry:
            match = next((g for g in gpus if g.uuid.startswith(entry) or g.uuid.startswith(f"GPU-{entry}")), None)
        if match is None or match in chosen:
            break
        chosen.append(match)
    return [Gpu(index=i, physical_index=g.physical_index, uuid=g.uuid, name=g.name, total_mb=g.total_mb,
                free_mb=g.free_mb) for i, g in enumerate(chosen)]


def list_gpus() -> list[Gpu]:
    """The CUDA GPUs this process may use, with their free memory; [] when there are none."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        result = subprocess.run([exe, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
                                capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("nvidia-smi did not answer (%s); treating this machine as having no GPUs", exc)
        return []
    if result.returncode != 0:
        log.warning("nvidia-smi failed (exit %s: %s); treating this machine as having no GPUs",
                    result.returncode, result.stderr.strip()[:200])
        return []
    return _apply_visible_devices(parse_nvidia_smi(result.stdout), os.environ.get("CUDA_VISIBLE_DEVICES"))


def cuda_device_count() -> int:
    return len(list_gpus())
