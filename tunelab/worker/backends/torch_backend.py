"""The torch backend: transformers + PEFT + a family's trainer, reporting through events.

`run(config, ctx)` reads top to bottom as the run's stages: load the model and its
tokenizer or processor (the run's family, `families/registry.detect`, composed with its
objective, `methods/registry.for_objective`), load and
tokenize the data (text rows shared with the mlx backend, so both train on the same
tokens; a text run does this on a thread while its model loads, `data_prefetch`), build the adapter and the family's trainer (TRL's SFTTrainer; for embedders
sentence-transformers' own; for speech-to-text transformers' Seq2SeqTrainer) with the same
progress and stop callbacks, train, save.
How the run ends:
  normal    the adapter (or full model) and tokenizer are saved in `output_dir`, next to
            the Trainer's final `checkpoint-<last step>`; with `export_after`, rank 0 then
            exports it in this process (worker/export_after.py); `complete{output_dir}`.
  stop+save the Trainer saves `checkpoint-<current step>` and stops; the checkpoint is
            validated before `complete{output_dir, "stopped at step N; ..."}` is sent.
  cancel    nothing more is saved; `complete{output_dir: None, "cancelled"}`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunelab import events, families, paths
from tunelab.run_facts import write_run_facts
from tunelab.worker.data import prepare as data
from tunelab.worker.context import WorkerContext
from tunelab.worker.families.protocol import TrainingFamily
from tunelab.worker.stall import DownloadStallWatch, hub_cache_folders

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


def _family_words(family: str) -> str:
    """How the setup message names the family's model ("Setting up lora of a ... on CPU"):
    its spec's words, nothing for the text family."""
    if family == families.DEFAULT.name:
        return ""
    try:
        return f" of {families.get(family).words}"
    except KeyError:
        return f" of a {family} model"


def run(config: WorkerConfig, ctx: WorkerContext) -> None:
    output_dir = Path(config.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    ctx.emit(events.make(events.OUTPUT_DIR, output_dir=str(output_dir)))

    ctx.stage("loading_model", f"Loading model {config.model_name}")
    # The heavy imports (~6 s) come after the first stop check, so an early stop is quick.
    from tunelab.worker.bnb_import import import_bitsandbytes

    import_bitsandbytes()  # before peft imports it (see bnb_import.py)
    _quiet_libraries()
    import transformers

    from tunelab.worker import model_setup
    from tunelab.worker.families import registry as families
    from tunelab.worker.launch import ranks
    from tunelab.worker.methods.registry import for_objective

    device = model_setup.device_settings(config)
    ctx.emit(events.make(events.MODEL_LOAD_STARTED))
    with _stall_watch(config, ctx):
        family = for_objective(config, families.detect(config))  # sft: the family; else a method on it
        prefetch = _prefetch_data(config, family, output_dir)
        loaded = family.load(config, device)
    model = loaded.model
    device = model_setup.settle_cpu_precision(config, device, model)
    if ranks.rank() == 0:
        write_run_facts(output_dir, precision=device.precision, cuda=device.cuda, world_size=ranks.world_size())
    ctx.emit(events.make(events.MODEL_LOAD_COMPLETED))

    ctx.stage("loading_dataset", "Loading the dataset")
    raw = prefetch.raw() if prefetch else data.load_raw(config, _datasets_cache(output_dir))
    ctx.stage("formatting", f"Tokenizing {len(raw.train)} {raw.format} rows")
    prepared = prefetch.prepared() if prefetch else family.prepare(config, loaded, raw)
    ctx.emit(events.modality(family.modality(raw)))
    for note in prepared.notes:
        ctx.emit(events.status(note))

    ctx.stage("configuring", _describe_method(config, device, model, family.name))
    # Adapter weights are drawn from the global generator: seed it, or two runs with the
    # same seed start from different adapters (the Trainer seeds only later).
    transformers.set_seed(config.seed)
    model = family.wrap(model, config, device)
    if config.use_loftq:
        from tunelab.worker.loftq_base import save_loftq_base

        save_loftq_base(model, output_dir)
    trainer, stopper = _build_trainer(config, ctx, device, model, family, loaded, prepared, output_dir)
    if prepared.eval is not None and trainer.args.eval_strategy != "no":
        ctx.emit(events.make(events.EVAL_CONFIGURED, eval_rows=len(prepared.eval)))

    resume = config.resume_from
    # The memory held before the first step, against which a memory estimate's training
    # terms (gradients, optimizer state, activations, logits) are measured.
    from tunelab.worker.callbacks import memory_now_gb, peak_memory_gb

    ctx.stage("training", f"Training from step {_step_of(resume)}" if resume else "Training",
              memory_before_training_gb=memory_now_gb(), peak_before_training_gb=peak_memory_gb()[0])
    trainer.train(resume_from_checkpoint=resume or None)
    _finish(ctx, config, trainer, stopper, family, loaded, output_dir)


def _prefetch_data(config: WorkerConfig, family: TrainingFamily, output_dir: Path) -> Any:
    """For a family that prefetches (a `PrefetchingFamily`: the text family's own sft run): its
    tokenizer now, and the data loading and tokenizing on a thread while the model loads (see
    data/prefetch.py); else None."""
    if not family.prefetches_data:
        return None
    from tunelab.worker.data.prefetch import DataPrefetch

    return DataPrefetch(config, family.load_tokenizer(config), _datasets_cache(output_dir))


def _datasets_cache(output_dir: Path) -> Path:
    """Each rank of a distributed run prepares the data itself, in its own cache: two
    processes writing one cache folder at once is not something datasets promises to survive."""
    cache = paths.run_datasets_cache(output_dir)
    rank = os.environ.get("RANK")
    return cache / f"rank-{rank}" if rank is not None and int(os.environ.get("WORLD_SIZE") or 1) > 1 else cache


def _quiet_libraries() -> None:
    import warnings

    import datasets
    import transformers

    # Deprecation notices inside the libraries are for their developers, not for a user
    # watching a run; real problems arrive as exceptions and become error events.
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    datasets.disable_progress_bars()
    datasets.utils.logging.set_verbosity_error()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def _stall_watch(config: WorkerConfig, ctx: WorkerContext) -> Any:
    from contextlib import nullcontext

    if Path(config.model_name).expanduser().exists():
        return nullcontext()  # a local folder downloads nothing
    return DownloadStallWatch(ctx, hub_cache_folders(config.model_name))


def _describe_method(config: WorkerConfig, device: Any, model: Any, family: str = "text") -> str:
    method = config.training_type
    extras = [name for name, on in (("dora", config.use_dora), ("rslora", config.use_rslora), ("loftq", config.use_loftq)) if on]
    where = "CUDA" if device.cuda else "CPU"
    attention = getattr(getattr(model, "config", None), "_attn_implementation", None) or "default"
    kind = _family_words(family)
    return (f"Setting up {method}{' (' + ', '.join(extras) + ')' if extras else ''}{kind} on {where} in {device.precision}, "
            f"{'packed, ' if config.packing else ''}{attention} attention")


def _build_trainer(config, ctx, device, model, family, loaded, prepared, output_dir) -> tuple[Any, Any]:
    """The family's trainer (TRL's SFTTrainer, or sentence-transformers' own), reporting
    through the same callbacks: progress events, stopping on request, and the per-parameter
    and per-element gradient clips where the run asks for them."""
    from transformers import PrinterCallback

    from tunelab.worker.callbacks import ProgressReporter, StopOnRequest
    from tunelab.worker.grad_clipping import gradient_clipper

    stopper = StopOnRequest(ctx)
    callbacks = [*gradient_clipper(config), ProgressReporter(ctx), stopper]
    trainer = family.build_trainer(config, device, model, loaded, prepared, output_dir, callbacks)
    # With tqdm off the Trainer prints every log dict to stdout; progress events replace it.
    trainer.remove_callback(PrinterCallback)
    return trainer, stopper


def _step_of(checkpoint: str) -> str:
    return Path(checkpoint).name.removeprefix("checkpoint-")


def _finish(ctx: WorkerContext, config: WorkerConfig, trainer: Any, stopper: Any, family: Any, loaded: Any,
            output_dir: Path) -> None:
    from tunelab.worker.launch import ranks

    step = trainer.state.global_step
    if ctx.stop == "cancel":
        ctx.complete(None, "cancelled")
        return
    # A stop that lands on the last step changes nothing: the run simply completes.
    if stopper.stopped_at is not None and stopper.stopped_at < trainer.state.max_steps and ctx.stop == "save":
        ranks.barrier()  # every rank's share of the checkpoint is written before it is checked
        ctx.complete_stopped(output_dir, stopper.stopped_at)
        return
    ctx.stage("saving", "Saving the final model")
    family.save_final(trainer, loaded, output_dir)
    ranks.barrier()
    final_save = output_dir / f"checkpoint-{step}"  # the Trainer saves at the last step
    message = f"completed {step} steps{_final_loss(trainer)}"
    if ranks.rank() == 0:  # every rank has saved (the barrier); one exports, if export_after asks
        from tunelab.worker.export_after import export_after_training

        message += export_after_training(ctx, config, trainer, output_dir)
    ctx.complete(str(output_dir), message, final_save if final_save.is_dir() else None)


def _final_loss(trainer: Any) -> str:
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    if not losses or not math.isfinite(losses[-1]):
        return ""
    return f"; final loss {losses[-1]:.4f}"
