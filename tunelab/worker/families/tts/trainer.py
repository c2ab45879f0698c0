"""The text-to-speech families' Trainer: transformers' own, over the codec-token rows, with a sample at each eval.

Built from the same run settings as every other family (`trainer_setup.training_arguments`)
and with the backend's callbacks, so progress, stop-and-save, cancel, checkpoints and
resume behave as for text runs. `SampleAtEval` speaks the run's sample sentence after
every evaluation (on the main process) into `samples/step-<N>.wav`: each family passes
its own `speak(model, dest)` (Orpheus's: `tts/sample.py`) and, where its loss needs more than
the model's forward on the batch, its own Trainer class.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import Trainer, TrainerCallback, TrainingArguments

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


class SampleAtEval(TrainerCallback):
    def __init__(self, speak: Callable[[Any, Path], Any], output_dir: Path):
        self.speak, self.output_dir = speak, Path(output_dir)

    def on_evaluate(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or model is None:
            return
        from tunelab.worker.families.tts.sample import sample_path

        was_training = model.training
        model.eval()
        try:
            self.speak(model, sample_path(self.output_dir, state.global_step))
        finally:
            model.train(was_training)


def build_sampling_trainer(config: WorkerConfig, device: Any, model: Any, processing: Any, prepared: Any, output_dir: Any,
                           callbacks: list[Any], speak: Callable[[Any, Path], Any], trainer_class: type = Trainer,
                           **arguments: Any) -> Any:
    """transformers' Trainer (or `trainer_class`) with the family's sample at each eval."""
    from tunelab.worker.trainer_setup import training_arguments

    settings = training_arguments(config, device, output_dir, has_eval=prepared.eval is not None)
    evaluates = settings["eval_strategy"] != "no"
    args = TrainingArguments(**settings, remove_unused_columns=False, **arguments)
    sampler = [SampleAtEval(speak, output_dir)] if evaluates else []
    return trainer_class(model=model, args=args, train_dataset=prepared.train, eval_dataset=prepared.eval if evaluates else None,
                         processing_class=processing, data_collator=prepared.collator, callbacks=callbacks + sampler)


def build_tts_trainer(config: WorkerConfig, device: Any, model: Any, tokenizer: Any, layout: Any, codec: Any,
                      prepared: Any, output_dir: Any, callbacks: list[Any]) -> Any:
    from tunelab.worker.families.tts.layout import FRAME
    from tunelab.worker.families.tts.sample import write_sample

    # Room for a little more than the longest clip, in whole frames.
    longest = prepared.longest_audio + 2 * FRAME

    def speak(model: Any, dest: Path) -> Path:
        return write_sample(model, tokenizer, layout, codec, prepared.sample_prompt, longest, dest)

    return build_sampling_trainer(config, device, model, tokenizer, prepared, output_dir, callbacks, speak)
