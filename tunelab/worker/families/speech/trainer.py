"""The speech-to-text family's Trainer: transformers' Seq2SeqTrainer, with word error rate at eval.

Built from the same run settings as the SFT Trainer (`trainer_setup.training_arguments`)
and with the same callbacks (the backend's), so progress, stop-and-save,
cancel, checkpoints and resume behave exactly as for text runs. With an eval split
every evaluation also transcribes the eval clips (`generate`, started as the labels
start: `speech_prefix.generation_kwargs`) and scores them against their transcripts
with jiwer: `eval_wer` (a fraction: 0 is perfect, 1 as many errors as reference words)
lands in the Trainer's logs next to `eval_loss`. Rows whose transcript is empty have
no words to score and are left out of the rate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

from tunelab.worker.families.speech.collator import IGNORE_INDEX
from tunelab.worker.families.speech.prefix import generation_kwargs

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


def word_error_rate(references: list[str], predictions: list[str]) -> float | None:
    import jiwer

    pairs = [(ref.strip(), hyp.strip()) for ref, hyp in zip(references, predictions) if ref.strip()]
    if not pairs:
        return None
    return float(jiwer.wer([ref for ref, _ in pairs], [hyp for _, hyp in pairs]))


def wer_metric(tokenizer: Any) -> Any:
    """`compute_metrics` for the Trainer: decode the generated and the reference ids."""

    def compute(prediction: Any) -> dict[str, float]:
        generated, labels = np.asarray(prediction.predictions), np.asarray(prediction.label_ids)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        # Batches are padded with -100 when the Trainer gathers them.
        generated = np.where(generated == IGNORE_INDEX, pad, generated)
        labels = np.where(labels == IGNORE_INDEX, pad, labels)
        predictions = tokenizer.batch_decode(generated, skip_special_tokens=True)
        references = tokenizer.batch_decode(labels, skip_special_tokens=True)
        rate = word_error_rate(references, predictions)
        return {} if rate is None else {"wer": rate}

    return compute


class SpeechSeq2SeqTrainer(Seq2SeqTrainer):
    generation_kwargs: dict[str, Any] = {}

    def evaluate(self, eval_dataset: Any = None, ignore_keys: Any = None, metric_key_prefix: str = "eval", **gen_kwargs: Any) -> Any:
        return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix, **{**self.generation_kwargs, **gen_kwargs})


def _longest_labels(prepared: Any) -> int:
    sets = [prepared.train] + ([prepared.eval] if prepared.eval is not None else [])
    return max(len(labels) for rows in sets for labels in rows["labels"])


def build_speech_trainer(config: WorkerConfig, device: Any, model: Any, processing: Any, prepared: Any,
                         output_dir: Any, callbacks: list[Any]) -> Any:
    from tunelab.worker.trainer_setup import training_arguments

    settings = training_arguments(config, device, output_dir, has_eval=prepared.eval is not None)
    evaluates = settings["eval_strategy"] != "no"
    args = Seq2SeqTrainingArguments(
        **settings,
        remove_unused_columns=False,  # the collator reads the audio references itself
        include_num_input_tokens_seen="no",
        predict_with_generate=evaluates,
        # Room for the longest transcript (prefix and end token included), and a little more.
        generation_max_length=_longest_labels(prepared) + 8,
    )
    trainer = SpeechSeq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=prepared.train,
        eval_dataset=prepared.eval if evaluates else None,
        processing_class=processing,
        data_collator=prepared.collator,
        compute_metrics=wer_metric(processing.tokenizer) if evaluates else None,
        callbacks=callbacks,
    )
    trainer.generation_kwargs = generation_kwargs(model)
    return trainer
