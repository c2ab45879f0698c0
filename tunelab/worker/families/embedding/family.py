"""The embedding family: a sentence-transformers model trained on sentence-transformers' own trainer.

The same stages as every family (`TrainingFamily`, `families/protocol.py`), with the embedding steps:
  load     `SentenceTransformer(model_name)`: a sentence-transformers folder as it is, a
           plain encoder wrapped with mean pooling; `max_seq_length` caps its inputs.
  prepare  the data shape (`embedding/formats.py`: pairs, triplets, scored or labelled pairs)
           picks the loss (`embedding/loss.py`) and the columns handed to it, in order.
  wrap     LoRA: a PEFT adapter on the encoder inside the first module (PEFT's own
           `get_peft_model`: sentence-transformers' `add_adapter` goes through
           transformers' PEFT integration, which needs peft >= 0.22, newer than the
           pinned 0.21); full fine-tuning trains every weight.
  trainer  `SentenceTransformerTrainer` with the shared Trainer arguments, the no-duplicates
           batch sampler for in-batch-negative losses, and an evaluator
           (`embedding/eval.py`) at each eval when there is an eval split.
  save     the adapter merged into the encoder, saved as a sentence-transformers folder
           that `SentenceTransformer(output_dir)` loads. Checkpoints keep the adapter alone
           (`adapter_model.safetensors`), and a resume loads it back into the adapter.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunelab.worker.families.embedding import loss as embedding_loss
from tunelab.worker.data.prepare import PreparedData
from tunelab.worker.families.embedding.formats import EMBEDDING_FORMATS, LABEL_COLUMNS, not_embedding_data
from tunelab.worker.data.formats import DataFormatError
from tunelab.worker.families.protocol import Loaded
from tunelab.worker.model_setup import SetupError, default_target_modules

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


class EmbeddingFamily:
    name = "embedding"
    prefetches_data = False  # its rows are checked, not tokenized (sentence-transformers tokenizes each batch)

    def __init__(self) -> None:
        self.loss: str | None = None  # chosen in `prepare`, once the data shape is known

    def load(self, config: WorkerConfig, device: Any) -> Loaded:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(config.model_name, device="cuda" if device.cuda else "cpu",
                                    trust_remote_code=config.trust_remote_code, token=config.hf_token or None)
        limit = config.max_seq_length
        if limit and (model.max_seq_length is None or limit < model.max_seq_length):
            model.max_seq_length = limit
        return Loaded(model, model.tokenizer, model.tokenizer)

    def prepare(self, config: WorkerConfig, loaded: Loaded, raw: Any) -> PreparedData:
        if raw.format not in EMBEDDING_FORMATS:
            raise not_embedding_data(raw.format, raw.train.column_names, raw.train[0] if len(raw.train) else None)
        train = _columns_in_order(raw.train, raw.format, "training")
        eval_set = _columns_in_order(raw.eval, raw.format, "eval") if raw.eval is not None else None
        self.loss = embedding_loss.choose_loss(raw.format, config)
        embedding_loss.check_batch(self.loss, config, len(train))
        return PreparedData(train=train, eval=eval_set, format=raw.format)

    def modality(self, raw: Any) -> str:
        return "embedding"

    def targets(self, model: Any, config: WorkerConfig) -> list[str] | None:
        """The adapter's layers in the encoder inside the first module."""
        return config.target_modules or default_target_modules(model[0].model)

    def wrap(self, model: Any, config: WorkerConfig, device: Any) -> Any:
        if config.training_type not in ("lora", "qlora"):
            for parameter in model.parameters():
                parameter.requires_grad_(True)
            return model
        if config.load_in_4bit:
            raise SetupError("training_type", "4-bit loading (QLoRA) is not available for embedding models; use training_type=lora or full")
        from peft import LoraConfig, TaskType, get_peft_model

        encoder = model[0].model
        if device.gradient_checkpointing:
            # Checkpointed blocks need an input that requires grad, or the frozen base cuts the graph.
            encoder.enable_input_require_grads()
        lora = LoraConfig(
            task_type=TaskType.FEATURE_EXTRACTION,
            r=config.lora_r,
            lora_alpha=config.lora_alpha,
            lora_dropout=config.lora_dropout,
            target_modules=self.targets(model, config),
            bias="none",
            use_rslora=config.use_rslora,
            use_dora=config.use_dora,
        )
        try:
            model[0].model = get_peft_model(encoder, lora)
        except ValueError as exc:  # e.g. target modules that do not exist in this model
            raise SetupError("target_modules", f"{exc}; list module names this model has") from exc
        return model

    def build_trainer(self, config: WorkerConfig, device: Any, model: Any, loaded: Loaded, prepared: PreparedData,
                      output_dir: Any, callbacks: list[Any]) -> Any:
        from sentence_transformers import SentenceTransformerTrainingArguments
        from sentence_transformers.base.sampler import BatchSamplers

        from tunelab.worker.families.embedding.eval import build_evaluator
        from tunelab.worker.families.embedding.trainer import EmbeddingTrainer
        from tunelab.worker.trainer_setup import training_arguments

        shared = training_arguments(config, device, Path(output_dir), has_eval=prepared.eval is not None)
        sampler = BatchSamplers.NO_DUPLICATES if embedding_loss.uses_in_batch_negatives(self.loss) else BatchSamplers.BATCH_SAMPLER
        args = SentenceTransformerTrainingArguments(**shared, batch_sampler=sampler)
        evaluating = prepared.eval is not None and args.eval_strategy != "no"
        return EmbeddingTrainer(
            model=model,
            args=args,
            train_dataset=prepared.train,
            eval_dataset=prepared.eval if evaluating else None,
            loss=embedding_loss.build_loss(self.loss, model, config),
            evaluator=build_evaluator(prepared.format, prepared.eval, args.per_device_eval_batch_size) if evaluating else None,
            callbacks=callbacks,
        )

    def save_final(self, trainer: Any, loaded: Loaded, output_dir: Any) -> None:
        from tunelab.worker.families.embedding.trainer import merge_adapter

        merge_adapter(trainer.model)
        if trainer.args.should_save:
            trainer.model.save_pretrained(str(output_dir))


def _columns_in_order(rows: Any, fmt: str, what: str) -> Any:
    """The shape's columns, in the order the loss reads them (other columns dropped); a row
    whose text is missing is an error naming it, not a crash inside the tokenizer."""
    needed = list(EMBEDDING_FORMATS[fmt])
    rows = rows.select_columns(needed)
    texts = [c for c in needed if c not in LABEL_COLUMNS]
    for column in texts:
        values = rows[column]
        bad = next((i for i, v in enumerate(values) if not isinstance(v, str) or not v.strip()), None)
        if bad is not None:
            raise DataFormatError("dataset", f"row {bad} of the {what} data has no text in '{column}' (got {values[bad]!r}); "
                                             "every row needs a non-empty text in each of the columns " + ", ".join(texts))
    _check_labels(rows, fmt, what)
    return rows


def _check_labels(rows: Any, fmt: str, what: str) -> None:
    """A score is a number; a label says relevant (1) or not (0), which the contrastive
    losses and the evaluator of labelled pairs take as given."""
    if fmt == "scored_pairs":
        values = rows["score"]
        bad = next((i for i, v in enumerate(values) if isinstance(v, bool) or not isinstance(v, (int, float))), None)
        if bad is not None:
            raise DataFormatError("dataset", f"row {bad} of the {what} data has score {values[bad]!r}; a score is a number "
                                             "(e.g. a similarity from 0 to 1, or 0 to 5 as in STS)")
    elif fmt == "labelled_pairs":
        values = rows["label"]
        bad = next((i for i, v in enumerate(values) if v not in (0, 1)), None)
        if bad is not None:
            raise DataFormatError("dataset", f"row {bad} of the {what} data has label {values[bad]!r}; a label is 1 (the "
                                             "document is relevant) or 0 (it is not). Graded relevance is a score: map it "
                                             "with column_mapping {sentence1: query, sentence2: document, score: label}")
