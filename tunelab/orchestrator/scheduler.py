"""Devices and the queue: which devices a run gets now, or that it must wait.

A device is a GPU, named `gpu-<pin>` like its lock file (ownership.py), or the machine's
CPU, `cpu`, which a run without GPUs holds whole: a CPU-only machine is one device.
`place` gives a run a set of devices disjoint from the busy ones — its explicit
`gpu_ids`, or the `num_gpus` (default one) free GPUs with the most free memory — or None
when they are not all free. The busy set is what this server's live runs hold plus
what the database says running runs hold (another server or a `tunelab train` on the
same history); the device lock files catch the rest when the run claims them.

Queued runs start strictly in queue order (priority, then position): the first one
that cannot be placed waits, and the ones behind it wait for it, so a run asking for
many GPUs is never starved by smaller runs slipping past it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tunelab import hardware
from tunelab.config.run_config import RunConfig
from tunelab.orchestrator.gpus import choose_gpus
from tunelab.orchestrator.ownership import CPU_DEVICE

# How often the scheduler looks at the queue without being woken (a run of another
# process on the same history may have ended meanwhile).
POLL_S = 2.0


@dataclass
class PlannedStart:
    """A start that passed every check a start makes before it needs devices."""

    cfg: RunConfig
    output_dir: Path
    resume_from: Path | None
    resumed_from: int | None
    resume_run_id: int | None
    start_request_id: str | None
    owned_by: str | None


def device_request(cfg: RunConfig) -> dict[str, Any]:
    """What the run asks for, as stored with a queued run."""
    if cfg.gpu_ids:
        return {"gpu_ids": list(cfg.gpu_ids)}
    return {"num_gpus": cfg.num_gpus or 1}


def device_name(gpu: hardware.Gpu) -> str:
    return f"gpu-{gpu.pin}"


def devices_for(chosen: list[hardware.Gpu]) -> list[str]:
    """The device names a run placed on `chosen` holds ([] GPUs: the CPU)."""
    return [device_name(g) for g in chosen] or [CPU_DEVICE]


def place(cfg: RunConfig, gpus: list[hardware.Gpu], busy: set[Any]) -> list[hardware.Gpu] | None:
    """The GPUs the run gets now ([] for a run that trains without them and holds the
    CPU device), or None when what it needs is busy."""
    if not choose_gpus(cfg, gpus):  # no GPUs here, or a backend / Ray run that pins none
        return None if CPU_DEVICE in busy else []
    free = [g for g in gpus if device_name(g) not in busy]
    if cfg.gpu_ids:
        by_index = {g.index: g for g in free}
        wanted = [by_index.get(i) for i in cfg.gpu_ids]
        return None if None in wanted else wanted
    chosen = choose_gpus(cfg, free)
    return chosen if len(chosen) == (cfg.num_gpus or 1) else None


def as_if_idle(gpus: list[hardware.Gpu]) -> list[hardware.Gpu]:
    """The GPUs with all their memory free: what a queued run is checked against up front
    (the runs on them now will have ended when it starts)."""
    return [replace(g, free_mb=g.total_mb) if g.total_mb is not None else g for g in gpus]


def queued_snapshot(row: dict[str, Any], position: int | None) -> dict[str, Any]:
    """A snapshot-shaped view of a run that has no live state here: queued, cancelled,
    finished in an earlier server life, or trained by another server."""
    status = row["status"]
    waiting = f"queued at position {position}, waiting for {_wanted(row.get('device_request'))}"
    return {
        "phase": status, "status": status, "run_id": row["id"], "started_at": row["started_at"],
        "model_name": row["model_name"], "dataset_name": row["dataset_name"], "display_name": row["display_name"],
        "step": row.get("final_step") or 0, "total_steps": row.get("total_steps"), "final_loss": row.get("final_loss"),
        "message": waiting if status == "queued" else row.get("error_message") or status,
        "error": row.get("error_message") if status == "error" else None, "output_dir": row.get("output_dir"),
        "modality": row.get("modality"), "resume_blocked": row.get("resume_blocked"), "extra": {},
        "queue_position": position, "devices": row.get("devices"), "owner": row.get("owner"),
        "worker_pid": None, "world_size": None, "malformed_events": 0,
    }


def _wanted(request: dict[str, Any] | None) -> str:
    request = request or {}
    if request.get("gpu_ids"):
        return "GPU " + ", ".join(str(i) for i in request["gpu_ids"])
    count = request.get("num_gpus") or 1
    return f"{count} free device{'s' if count > 1 else ''}"
