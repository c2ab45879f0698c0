"""Where a run continues from: `resume_from` resolution and the "can this run resume?" rules.

`resume_from` is a run id (its latest valid checkpoint is used) or a checkpoint folder,
which must lie inside the folders tunelab may read and pass `validate_checkpoint`.
A stored run may be resumed when it ended `error` or `stopped` without being cancelled,
was not blocked, has steps left, and has a valid checkpoint on disk (or ended in the
queue, unblocked, before it trained: it then starts afresh) — once: unless the run
that resumed it is gone, or ended (cancelled, failed) without a newer checkpoint of its
own, in which case the original may be resumed again from its own last checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tunelab import paths
from tunelab.checkpoints import InvalidCheckpoint, latest_valid_checkpoint, validate_checkpoint
from tunelab.config.run_config import ConfigError
from tunelab.orchestrator.errors import NotResumable
from tunelab.store import Store


def resolve_resume_from(store: Store, value: str | None, resume_run_id: int | None) -> tuple[Path | None, int | None]:
    """(checkpoint folder, the run it came from) for a start; (None, None) for a fresh run."""
    if value is None or not str(value).strip():
        if resume_run_id is None:
            return None, None
        _, checkpoint = check_resumable(store, resume_run_id)
        return checkpoint, resume_run_id
    text = str(value).strip()
    if text.isdigit():
        # A number past SQLite's integer range names no run (and would not fit the query).
        run = store.get_run(int(text)) if len(text) < 19 else None
        if run is None:
            raise ConfigError.single("resume_from", f"there is no run {text}; give an existing run id or a checkpoint folder")
        checkpoint = latest_valid_checkpoint(run.get("output_dir"))
        if checkpoint is None:
            raise ConfigError.single("resume_from", f"run {text} has no valid checkpoint to resume from; pick another run or checkpoint")
        return Path(checkpoint), resume_run_id if resume_run_id is not None else int(text)
    candidate = Path(os.path.expanduser(text))
    if not candidate.is_absolute():
        candidate = paths.outputs_root() / candidate  # checkpoints live under the outputs root
    folder = paths.check_readable(str(candidate), "resume_from")
    try:
        validate_checkpoint(folder)
    except InvalidCheckpoint as exc:
        raise ConfigError.single("resume_from", f"{exc.reason}; point resume_from at a complete checkpoint-<step> folder") from None
    return folder, resume_run_id


def check_world_size(checkpoint: Path, world_size: int) -> None:
    """A checkpoint continues only on the number of ranks that wrote it: each rank
    restores the RNG state its own rank saved, so on another number some ranks would
    start without theirs (or some states would go unused). Refused before anything
    starts, saying the number to set."""
    try:
        saved = validate_checkpoint(checkpoint).world_size
    except InvalidCheckpoint as exc:  # changed on disk since it was chosen a moment ago
        raise ConfigError.single("resume_from", f"{exc.reason}; point resume_from at a complete checkpoint-<step> folder") from None
    if saved == world_size:
        return
    fix = ("train in one process: leave num_processes out (or set it to 1), with at most one GPU" if saved == 1
           else f"set num_processes={saved} (with GPUs: {saved} of them through num_gpus or gpu_ids; across nodes: "
                f"processes per node x nodes.count = {saved})")
    raise ConfigError.single("num_processes", f"{checkpoint.name} was saved by {saved} training process(es) (world size "
                                              f"{saved}) and this run would train with {world_size}; a run resumes on the "
                                              f"world size it saved with: {fix}")


def check_resumable(store: Store, run_id: int) -> tuple[dict[str, Any], Path | None]:
    """The stored run and the checkpoint it would resume from, or NotResumable saying why.
    The checkpoint is None for a run that ended in the queue before it trained, resumable
    (a secret it needed was missing): its resume starts it afresh."""
    run = store.get_run(run_id)
    if run is None:
        raise NotResumable(run_id, "there is no such run", http_status=404)
    status = run["status"]
    if status == "running":
        raise NotResumable(run_id, "it is still running")
    if status == "completed":
        raise NotResumable(run_id, "it completed; start a new run to train further", http_status=400)
    if status == "stopped" and run.get("cancel_requested"):
        raise NotResumable(run_id, "it was cancelled, so nothing of it was kept", http_status=400)
    successor = run.get("resumed_by_run_id")
    if successor is not None and _continuation_counts(store, successor, run.get("final_step")):
        raise NotResumable(run_id, f"it was already resumed as run {successor}; resume that run instead")
    if run.get("resume_blocked"):
        detail = f" ({run['error_message']})" if run.get("error_message") else ""
        raise NotResumable(run_id, f"its last checkpoint cannot be trusted{detail}", http_status=400)
    total, final = run.get("total_steps"), run.get("final_step")
    if status == "stopped" and total and final is not None and final >= total:
        raise NotResumable(run_id, f"it already trained all {total} steps", http_status=400)
    # After a continuation, its own newer saves may share the folder: take the run's own.
    checkpoint = latest_valid_checkpoint(run.get("output_dir"), at_most=final if successor is not None else None)
    if checkpoint is None and run.get("devices") == [] and final is None:  # ended in the queue, never trained
        if run.get("resumed_from_run_id") is not None:
            raise NotResumable(run_id, f"it never trained; resume run {run['resumed_from_run_id']}, which it was to "
                                       "continue, instead", http_status=400)
        return run, None
    if checkpoint is None:
        where = run.get("output_dir") or "its output folder"
        raise NotResumable(run_id, f"there is no valid checkpoint in {where}", http_status=400)
    return run, Path(checkpoint)


def _continuation_counts(store: Store, successor_id: int, resumed_at: int | None) -> bool:
    """Whether the run that resumed another still stands for it: it is running or
    completed, or it kept a valid checkpoint newer than the step it started from."""
    successor = store.get_run(successor_id)
    if successor is None or successor.get("cancel_requested"):
        return False  # deleted, or cancelled: it kept nothing
    if successor["status"] in ("queued", "running", "completed"):
        return True
    if successor["status"] == "cancelled":
        return False  # withdrawn from the queue before it trained
    newest = latest_valid_checkpoint(successor.get("output_dir"))
    return newest is not None and (resumed_at is None or validate_checkpoint(newest).step > resumed_at)
