"""Saying what to change when a run ran out of GPU memory.

PyTorch reports it as `torch.OutOfMemoryError` (older paths: a RuntimeError whose text
says "out of memory"), a wall of allocator figures that names no setting. The run still
ends `error`, but with the settings that shrink memory and, where the Trainer had saved a
checkpoint, the way to continue from it with them — a run keeps only what it saved
(`save_steps`). Torch-free: torch is consulted only if the backend already imported it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from tunelab.checkpoints import latest_valid_checkpoint

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


def is_out_of_memory(exc: BaseException) -> bool:
    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def explain_out_of_memory(config: "WorkerConfig", exc: BaseException) -> str | None:
    """The error message for an out-of-memory failure, or None for any other failure."""
    if not is_out_of_memory(exc):
        return None
    first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    batch, accumulation = config.batch_size, config.gradient_accumulation_steps
    changes = [
        f"lower batch_size (now {batch}) and raise gradient_accumulation_steps (now {accumulation}) to keep the effective batch",
        f"lower max_seq_length (now {config.max_seq_length})",
    ]
    if config.gradient_checkpointing is False:  # None is on wherever CUDA is
        changes.append("set gradient_checkpointing=true")
    if config.training_type != "qlora":
        changes.append("use training_type=qlora (a 4-bit base)")
    changes.append("or use a GPU with more free memory (several GPUs per run need multi-GPU runs)")
    checkpoint = latest_valid_checkpoint(config.output_dir)
    if checkpoint is not None:
        after = (f"{checkpoint.name} was kept: start again with resume_from={checkpoint} and the changed settings "
                 "(or resume this run as it is)")
    else:
        after = "no checkpoint was saved yet; set save_steps to keep checkpoints along the way"
    return f"out of GPU memory ({first_line}). To fit: {'; '.join(changes)}. {after}."
