"""Which CUDA devices this machine has and how much memory each has free — without torch.

The server must never import torch. Devices are listed by asking `nvidia-smi`; where it
is missing or fails while an NVIDIA driver is present (common in containers), a short
child Python process asks torch instead (`TORCH_PROBE`), so the server itself still
never imports it. No driver, or neither answer, means no GPUs.

Numbering: every number here is CUDA's ordinal in PCI bus order (`CUDA_DEVICE_ORDER=
PCI_BUS_ID`, which is also how `nvidia-smi` numbers GPUs), and children get that order
set too. When the server itself runs with `CUDA_VISIBLE_DEVICES`, only those devices are
listed, numbered 0..n-1 in the order given — the numbering `gpu_ids` uses. Its entries
may be numbers, GPU UUIDs (or their prefixes) and MIG UUIDs. Each device carries the
exact `pin` a child's `CUDA_VISIBLE_DEVICES` must name to reach it: the physical number
for a whole GPU, the UUID for a MIG instance.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

log = logging.getLogger("tunelab.hardware")

QUERY = "index,uuid,memory.total,memory.free,name"
NVIDIA_SMI_TIMEOUT_S = 10
# Importing torch and creating a context on each device takes seconds, not minutes.
TORCH_PROBE_TIMEOUT_S = 60
# Present wherever an NVIDIA driver is loaded (and mounted into containers with GPUs).
DRIVER_MARKERS = ("/dev/nvidiactl", "/proc/driver/nvidia/gpus")
# Runs in a child interpreter with CUDA_DEVICE_ORDER=PCI_BUS_ID: one JSON line per device.
TORCH_PROBE = """
import json, torch
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        free, total = torch.cuda.mem_get_info(i)
        print(json.dumps({"index": i, "uuid": str(getattr(props, "uuid", "") or ""), "name": props.name,
                          "total_mb": total // 2**20, "free_mb": free // 2**20}))
"""
MIG_LINE = re.compile(r"^\s+MIG\s+(?P<profile>\S+)\s+Device\s+\d+:\s+\(UUID:\s*(?P<uuid>MIG-[^)\s]+)\)")
GPU_LINE = re.compile(r"^GPU\s+(?P<index>\d+):\s+(?P<name>.+?)\s+\(UUID:\s*(?P<uuid>GPU-[^)\s]+)\)")


@dataclass(frozen=True)
class Gpu:
    """One CUDA device as the training process will see it."""

    index: int  # the CUDA ordinal inside a process that inherits our CUDA_VISIBLE_DEVICES
    physical_index: int | None  # nvidia-smi's index of the (parent) GPU, where known
    uuid: str
    name: str
    total_mb: int | None  # None where unknown (nvidia-smi's [N/A], a MIG instance)
    free_mb: int | None
    pin: str = ""  # what a child's CUDA_VISIBLE_DEVICES names to see exactly this device

    def __post_init__(self) -> None:
        if not self.pin:
            object.__setattr__(self, "pin", str(self.physical_index) if self.physical_index is not None else self.uuid)

    @property
    def is_mig(self) -> bool:
        """A MIG slice: a process sees only one of them, so it is never one of a run's several devices."""
        return self.pin.startswith("MIG-") or self.uuid.startswith("MIG-")


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


def parse_mig_listing(text: str) -> list[Gpu]:
    """The MIG instances in `nvidia-smi -L`, each under the GPU line it belongs to."""
    migs: list[Gpu] = []
    parent: re.Match[str] | None = None
    for line in text.splitlines():
        if gpu := GPU_LINE.match(line):
            parent = gpu
        elif (mig := MIG_LINE.match(line)) and parent is not None:
            migs.append(Gpu(index=len(migs), physical_index=int(parent["index"]), uuid=mig["uuid"],
                            name=f"{parent['name']} MIG {mig['profile']}", total_mb=None, free_mb=None, pin=mig["uuid"]))
    return migs


def _match(entry: str, gpus: list[Gpu], migs: list[Gpu]) -> Gpu | None:
    if entry.lstrip("-").isdigit():
        return next((g for g in gpus if g.physical_index == int(entry)), None)
    if entry.startswith("MIG-"):
        found = next((m for m in migs if m.uuid == entry), None)
        # The older form MIG-GPU-<uuid>/<gi>/<ci> names its parent GPU inside it.
        parent = entry.removeprefix("MIG-").split("/", 1)[0]
        if found is None and parent.startswith("GPU-") and "/" in entry:
            gpu = next((g for g in gpus if g.uuid == parent), None)
            found = gpu and replace(gpu, uuid=entry, name=f"{gpu.name} MIG", total_mb=None, free_mb=None, pin=entry)
        return found
    if entry:
        return next((g for g in gpus if g.uuid.startswith(entry) or g.uuid.startswith(f"GPU-{entry}")), None)
    return None


def _apply_visible_devices(gpus: list[Gpu], visible: str | None, migs: list[Gpu] | None = None) -> list[Gpu]:
    """Keep only the devices CUDA_VISIBLE_DEVICES exposes, renumbered like CUDA does.

    Entries are ordinals, (prefixes of) GPU UUIDs or MIG UUIDs; CUDA stops at the first
    entry it cannot match, and so do we."""
    if visible is None:
        return gpus
    chosen: list[Gpu] = []
    for entry in (e.strip() for e in visible.split(",")):
        match = _match(entry, gpus, migs or [])
        if match is None or match in chosen:
            break
        chosen.append(match)
    return [replace(g, index=i) for i, g in enumerate(chosen)]


def _run(args: list[str], timeout: float, env: dict[str, str] | None = None) -> str | None:
    """stdout of a command that succeeded, else None (with the reason logged)."""
    try:
        result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("%s did not answer (%s)", Path(args[0]).name, exc)
        return None
    if result.returncode != 0:
        log.warning("%s failed (exit %s: %s)", Path(args[0]).name, result.returncode, result.stderr.strip()[-200:])
        return None
    return result.stdout


def _from_nvidia_smi(visible: str | None) -> list[Gpu] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    table = _run([exe, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"], NVIDIA_SMI_TIMEOUT_S)
    if table is None:
        return None
    migs: list[Gpu] = []
    if visible and "MIG-" in visible:
        migs = parse_mig_listing(_run([exe, "-L"], NVIDIA_SMI_TIMEOUT_S) or "")
    return _apply_visible_devices(parse_nvidia_smi(table), visible, migs)


def _driver_present() -> bool:
    return any(Path(marker).exists() for marker in DRIVER_MARKERS)


def _from_torch_probe(visible: str | None) -> list[Gpu]:
    """Ask torch in a child interpreter; it sees exactly what a run would see."""
    env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    out = _run([sys.executable, "-c", TORCH_PROBE], TORCH_PROBE_TIMEOUT_S, env=env) or ""
    entries = [e.strip() for e in visible.split(",")] if visible else []
    gpus = []
    for line in out.splitlines():
        try:
            row = json.loads(line)
            index = int(row["index"])
        except (ValueError, KeyError, TypeError):
            continue
        # The server's own entry reaches the same device from a child; without one, the
        # ordinal does, as the probe ran in the PCI bus order children get too.
        pin = entries[index] if index < len(entries) else str(index)
        gpus.append(Gpu(index=index, physical_index=int(pin) if pin.isdigit() else None, uuid=row.get("uuid") or "",
                        name=str(row.get("name") or "CUDA device"), total_mb=row.get("total_mb"),
                        free_mb=row.get("free_mb"), pin=pin))
    return gpus


def list_gpus() -> list[Gpu]:
    """The CUDA devices this process may use, with their free memory; [] when there are none."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = _from_nvidia_smi(visible)
    if gpus is not None:
        return gpus
    if not _driver_present():
        return []
    log.warning("nvidia-smi is missing or failing while an NVIDIA driver is loaded; asking torch in a child process")
    return _from_torch_probe(visible)


def cuda_device_count() -> int:
    return len(list_gpus())


def mig_slices(gpus: list[Gpu]) -> list[int]:
    """The CUDA ids (as `gpu_ids` counts) of the MIG slices among `gpus`."""
    return [g.index for g in gpus if g.is_mig]
