"""The text-to-speech family's Trainer: transformers' own, over the codec-token rows, with a sample at each eval.

Built from the same run settings as every other family (`trainer_setup.training_arguments`)
and with the backend's callbacks, so progress, stop-and-save, cancel, checkpoints and
resume behave as for text runs. `SampleAtEval` synthesises the run's sample sentence
after every evaluation (on the main process) into `samples/step-<N>.wav` (`tts_sample`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import Trainer, TrainerCallback, TrainingArguments


class SampleAtEval(TrainerCallback):
    def __init__(self, tokenizer: Any, layout: Any, codec: Any, text: str, max_audio_tokens: int, output_dir: Path):
        self.tokenizer, self.layout, self.codec = tokenizer, layout, codec
        self.text, self.max_audio_tokens, self.output_dir = text, max_audio_tokens, Path(output_dir)

    def on_evaluate(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or model is None:
            return
        from tunelab.worker.tts_sample import sample_path, write_sample

        was_training = model.training
        model.eval()
        try:
            write_sample(model, self.tokenizer, self.layout, self.codec, self.text, self.max_audio_tokens,
                         sample_path(self.output_dir, state.global_step))
        finally:
            model.train(was_training)


def build_tts_trainer(config: dict[str, Any], device: Any, model: Any, tokenizer: Any, layout: Any, codec: Any,
                      prepared: Any, output_dir: Any, callbacks: list[Any]) -> Any:
    from tunelab.worker.tts_layout import FRAME
    from tunelab.worker.trainer_setup import training_arguments

    settings = training_arguments(config, device, output_dir, has_eval=prepared.eval is not None)
    evaluates = settings["eval_strategy"] != "no"
    args = TrainingArguments(**settings, remove_unused_columns=False)
    sampler = []
    if evaluates:
        # Room for a little more than the longest clip, in whole frames.
        longest = prepared.longest_audio + 2 * FRAME
        sampler = [SampleAtEval(tokenizer, layout, codec, prepared.sample_prompt, longest, output_dir)]
    return Trainer(model=model, args=args, train_dataset=prepared.train, eval_dataset=prepared.eval if evaluates else None,
                   processing_class=tokenizer, data_collator=prepared.collator, callbacks=callbacks + sampler)
