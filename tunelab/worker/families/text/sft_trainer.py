"""TRL's SFTTrainer with a token count that is right for packed rows and cheap on a GPU,
and `build_sft_trainer`, the text and vision families' trainer.

The Trainer's own count (`include_num_input_tokens_seen="non_padding"`) has two faults:
on padding-free packed batches, which carry no attention mask, it counts tokens that
differ from the pad id, so every EOS is dropped where pad = eos (the usual fallback);
and it calls `.item()` on every micro-batch, a GPU sync that stalls the queue of work
each time. Here each micro-batch adds its real tokens to a counter that stays on the
device, and the counter is folded into `state.num_input_tokens_seen` (saved with every
checkpoint, so a resumed run keeps counting) only when the Trainer logs or saves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trl import SFTTrainer

from tunelab.worker.launch import ranks

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


def real_tokens(inputs: dict[str, Any]) -> Any:
    """Non-padding tokens of one micro-batch, as a tensor where it can stay on the device."""
    if "attention_mask" in inputs:
        return inputs["attention_mask"].sum()
    # A padding-free (packed) batch is one row of real tokens, EOS included.
    return inputs["input_ids"].numel()


class TokenCountingSFTTrainer(SFTTrainer):
    """Build with `include_num_input_tokens_seen="no"`: this class does the counting.
    Set `embedding_learning_rate` to train the embeddings and head at their own rate."""

    _pending_tokens: Any = 0
    embedding_learning_rate: float | None = None

    def create_optimizer(self, model: Any = None) -> Any:
        optimizer = super().create_optimizer(model)
        if self.embedding_learning_rate is None:
            return optimizer
        from tunelab.worker.families.embedding.rate import embedding_parameter_ids, split_groups

        target = self.model if model is None else model
        groups = split_groups(optimizer.param_groups, embedding_parameter_ids(target), self.embedding_learning_rate)
        # Rebuilt before the first step, so no optimizer state is lost; the same class and
        # settings the Trainer chose, with the groups split.
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, target)
        self.optimizer = optimizer_cls(groups, **optimizer_kwargs)
        return self.optimizer

    def training_step(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        self._pending_tokens = self._pending_tokens + real_tokens(inputs)
        return super().training_step(model, inputs, *args, **kwargs)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        self._fold_tokens()
        super().log(logs, start_time)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        self._fold_tokens()
        super()._save_checkpoint(model, trial)

    def _fold_tokens(self) -> None:
        pending, self._pending_tokens = self._pending_tokens, 0
        # The one sync, at log or save time (which every rank reaches at the same step),
        # summed over the ranks of a distributed run.
        self.state.num_input_tokens_seen += ranks.total(int(pending))


def build_sft_trainer(config: WorkerConfig, device: Any, model: Any, processing: Any, prepared: Any,
                      output_dir: Any, callbacks: list[Any], padding_free: bool = False) -> TokenCountingSFTTrainer:
    """The text and vision families' trainer: TRL's SFTTrainer on the prepared token rows
    (`padding_free`: rows laid end to end in each micro-batch, as the model was loaded for)."""
    from tunelab.worker.families.text import direct_lm_head
    from tunelab.worker.trainer_setup import build_sft_config, parallel_settings

    args = build_sft_config(config, device, output_dir, has_eval=prepared.eval is not None)
    if padding_free and prepared.collator is None:
        # The rows are already cut to max_seq_length (worker/data/tokenization.py); TRL enforces no
        # max_length on unpacked padding-free rows and refuses to be given one.
        args.padding_free, args.max_length = True, None
    if prepared.collator is not None:
        args.remove_unused_columns = False  # the collator reads the text and image (or audio) columns itself
        # TRL skips its own tokenizing for columns named images only; audio rows are as ready.
        args.dataset_kwargs = {**(args.dataset_kwargs or {}), "skip_prepare_dataset": True}
    elif prepared.trainer_ready and not args.packing:
        # TRL would pass over every row up to three times more (labels copied from the ids,
        # cut to max_length, fully masked rows dropped: 2.8 s for 10,000 rows), all done
        # already; its collator takes the ids as labels where there are none. Packing still
        # needs TRL's pass, which lays the rows end to end.
        args.dataset_kwargs = {**(args.dataset_kwargs or {}), "skip_prepare_dataset": True}
    trainer = TokenCountingSFTTrainer(
        model=model,
        args=args,
        train_dataset=_collator_columns(prepared.train, config),
        eval_dataset=_collator_columns(prepared.eval, config) if args.eval_strategy != "no" else None,
        processing_class=processing,
        data_collator=prepared.collator,
        callbacks=callbacks,
    )
    trainer.embedding_learning_rate = config.embedding_learning_rate
    if not device.cuda and "fsdp" not in parallel_settings(config, checkpointing=device.gradient_checkpointing):
        direct_lm_head.install(trainer)  # TRL's torch fallback scores every position off CUDA
    return trainer


def _collator_columns(dataset: Any, config: WorkerConfig) -> Any:
    """Only what TRL's collator reads: the input ids, and the labels where completion
    masking made them differ (without them it uses the ids). Every column left in is
    fetched and converted for every row of every batch: 5% of a small model's step."""
    unused = ["completion_mask"] if config.train_on_completions else ["completion_mask", "labels"]
    return dataset.remove_columns([name for name in unused if name in dataset.column_names])
