"""The `export_after` setting in the worker: export the run the moment its final model is
saved, in the process that trained it, so the export pays no second import of torch,
transformers and PEFT (a separate `tunelab export` spends most of its time on those).

Called by torch_backend's `_finish` on a run that completed (not stopped, not cancelled),
on rank 0 only, after every rank has saved. The training state it no longer needs (the
optimizer's state, the gradients, cached CUDA blocks) is freed first; the merge itself runs
on the CPU, like the export child. The plan and the files are exactly those of
`tunelab export RUN --format <fmt>` (`export.plan.plan_export`, `export.run`): the same
folder `<run folder>/export-<fmt>` (`run-<id>-export-<fmt>` for a resumed run, which shares
its folder with the run it continues), staging and rename, manifest and dtype rule.
An export that fails never fails the run, whose weights are saved already: the failure is
sent as a status event and named in the completion message.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunelab import events
from tunelab.worker.context import WorkerContext

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

# A failure's reason, kept to what reads well in one line of a run's message.
REASON_MAX_CHARS = 600


def export_after_training(ctx: WorkerContext, config: WorkerConfig, trainer: Any, output_dir: Path) -> str:
    """Export as `config.export_after` asks; the note for the completion message
    ("; exported merged to <dest>", "; merged export failed: <why>"), or "" when none was asked."""
    fmt = config.export_after
    if not fmt:
        return ""
    if ctx.stop is not None:  # a stop that arrived as training ended: the user wants the process to end
        return _not_exported(ctx, fmt, "skipped", "a stop was requested; run `tunelab export` once the run is recorded")
    if config.run_id is None:  # the orchestrator adds it to the payload; a bare worker has none
        return _not_exported(ctx, fmt, "skipped", "this worker was not told its run id; run `tunelab export` instead")
    from tunelab.export.plan import ExportError, plan_export
    from tunelab.export.run import carry_out_in_process

    try:
        plan = plan_export(_run_record(config, output_dir), config.run_id, fmt, None, None)
        ctx.stage("exporting", f"Exporting {fmt} to {plan.dest}")
        _free_training_memory(trainer)
        result = carry_out_in_process(plan)
    except ExportError as exc:
        return _not_exported(ctx, fmt, "failed", str(exc))
    except Exception as exc:  # noqa: BLE001 - the run is saved; no export problem may take that away
        return _not_exported(ctx, fmt, "failed", f"{type(exc).__name__}: {exc}")
    return f"; exported {fmt} to {result.plan.dest}"


def _run_record(config: WorkerConfig, output_dir: Path) -> dict[str, Any]:
    """What `plan_export` reads of the store's row, as the run will be recorded: completed,
    with its folder and config (the row itself is written by the parent after this process ends)."""
    return {"id": config.run_id, "status": "completed", "output_dir": str(output_dir), "config": config.model_dump(mode="json"),
            "model_name": config.model_name, "resumed_from_run_id": config.resumed_from_run_id}


def _free_training_memory(trainer: Any) -> None:
    """Drop what only further training would use, so the export has the memory it held."""
    import torch

    model = getattr(trainer, "model", None)
    if model is not None:
        model.zero_grad(set_to_none=True)
    trainer.optimizer = None
    trainer.lr_scheduler = None
    accelerator = getattr(trainer, "accelerator", None)
    if accelerator is not None:
        accelerator.free_memory()  # its own references to the optimizer, scheduler and data loaders
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _not_exported(ctx: WorkerContext, fmt: str, what: str, why: str) -> str:
    note = f"{fmt} export {what}: {' '.join(why.split())[:REASON_MAX_CHARS]}"
    ctx.emit(events.status(note))
    return f"; {note}"
