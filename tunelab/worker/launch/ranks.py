"""What a training process needs to know and agree on when a run spans several ranks.

torchrun (or Ray Train) sets RANK, LOCAL_RANK and WORLD_SIZE; the HF Trainer (through
accelerate) joins the process group. Every helper here is a no-op in a one-process run,
so the backend calls them unconditionally. The collectives are torch.distributed's own:
one small tensor per call, on the device the backend communicates from (a GPU for
NCCL, the CPU for gloo), and every rank must make the same calls in the same order —
each is called at a point every rank passes at the same step.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

STOP_CODES = {None: 0, "save": 1, "cancel": 2}
STOP_NAMES = {code: name for name, code in STOP_CODES.items()}


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE") or 1)


def rank() -> int:
    return int(os.environ.get("RANK") or 0)


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK") or 0)


def active() -> bool:
    """True when collectives are possible and needed."""
    return world_size() > 1 and dist.is_available() and dist.is_initialized()


def _device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def agree_on_stop(mine: str | None) -> str | None:
    """Every rank's stop wish, combined: the strongest wins (cancel > save > go on).
    Only the reporting rank hears the parent, and any rank may have been signalled, so
    all of them ask at the same step boundary and all stop at the same step."""
    if not active():
        return mine
    flag = torch.tensor([STOP_CODES[mine]], dtype=torch.int32, device=_device())
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return STOP_NAMES[int(flag.item())]


def total(count: int) -> int:
    """A count summed over all ranks (tokens each rank trained on)."""
    if not active():
        return count
    value = torch.tensor([count], dtype=torch.int64, device=_device())
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return int(value.item())


def largest(values: list[float | None]) -> list[float | None]:
    """Each figure's maximum over ranks (peak memory: the rank closest to running out)."""
    if not active():
        return values
    tensor = torch.tensor([-1.0 if v is None else float(v) for v in values], dtype=torch.float64, device=_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [None if v < 0 else v for v in tensor.tolist()]


def barrier() -> None:
    if active():
        dist.barrier()
