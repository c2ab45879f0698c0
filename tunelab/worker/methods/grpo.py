"""GRPO (Group Relative Policy Optimization) on a text family, with TRL's GRPOTrainer.

Like the preference methods (it is one, with the family's load, wrap, modality and its
save without TRL's "ref" adapter), it replaces two steps:
  prepare        prompt_only rows (`prompt_formats`) as TRL's conversational prompt-only
                 rows: each prompt a list of chat turns (a string becomes one user turn), so
                 TRL renders it with the model's chat template and a generation prompt; the
                 reference answer (if any) under `reference`, other columns kept, since TRL
                 hands every column to the reward functions.
  build_trainer  TRL's GRPOTrainer with the run's reward functions and weights
                 (`grpo_rewards`), num_generations, max_completion_length and temperature.
                 An adapter run hands TRL its PeftModel: with beta > 0 TRL keeps a frozen
                 copy of the fresh adapter ("ref", zero for LoRA: the base with the adapter
                 off) as the reference; with beta 0 (TRL's default) there is no reference.
TRL logs reward, reward_std, rewards/<name>/mean and /std, kl (beta > 0), entropy and
completions/mean_length among others; the progress callback forwards them as each step's
extras. Completion batches count completions: batch_size x gradient_accumulation_steps is
a multiple of num_generations (checked in config/run_config.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunelab.config.grpo import generation_settings
from tunelab.config.preference import beta_for
from tunelab.worker.data.prepare import PreparedData, ensure_chat_template
from tunelab.worker.data.formats import DataFormatError
from tunelab.worker.methods.preference import PreferenceMethod
from tunelab.worker.methods.prompt_formats import PROMPT_FORMAT, describe_shape, prompt_row, reference_column

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

# TRL logs these every step; they say little about a run here and would crowd out the
# rewards within the per-step extras limit (events.EXTRA_MAX_COUNT).
QUIET_METRICS = ("completions/min_length", "completions/max_length", "completions/min_terminated_length",
                 "completions/max_terminated_length", "clip_ratio/low_min", "clip_ratio/high_max", "num_tokens")


class GRPOMethod(PreferenceMethod):
    def __init__(self, family: Any):
        super().__init__(family, "grpo")

    def prepare(self, config: WorkerConfig, loaded: Any, raw: Any) -> PreparedData:
        from tunelab.worker.methods.grpo_rewards import needs_reference, reward_functions

        if raw.format != PROMPT_FORMAT:
            raise DataFormatError("format", f"objective=grpo trains on prompts and the data is {raw.format} with columns "
                                            f"{raw.train.column_names}; expected {describe_shape()}. Map other names with "
                                            "column_mapping, e.g. {prompt: question, reference: answer}")
        reference = reference_column(raw.train.column_names)
        if reference is None and needs_reference(config):
            raise DataFormatError("rewards", f"the exact_match and contains rewards compare completions with a reference answer "
                                             f"and the data has no reference column (its columns: {raw.train.column_names}); "
                                             "add a reference or answer column, map one with column_mapping: {reference: "
                                             "your_column}, or choose other rewards (regex, length, json, python)")
        reward_functions(config)  # a user's reward file that cannot be imported fails here, before training
        ensure_chat_template(loaded.tokenizer)
        roles = config.role_mapping
        train = raw.train.map(lambda row: prompt_row(row, reference, roles), desc="Reading prompts")
        eval_set = None
        if raw.eval is not None:
            eval_reference = reference_column(raw.eval.column_names)
            eval_set = raw.eval.map(lambda row: prompt_row(row, eval_reference, roles), desc="Reading prompts")
        return PreparedData(train=_drop(train, reference), eval=_drop(eval_set, reference), format=raw.format)

    def build_trainer(self, config: WorkerConfig, device: Any, model: Any, loaded: Any, prepared: Any,
                      output_dir: Any, callbacks: list[Any]) -> Any:
        from trl import GRPOConfig

        from tunelab.worker.methods.grpo_rewards import reward_functions
        from tunelab.worker.trainer_setup import training_arguments

        functions, weights = reward_functions(config)
        generation = generation_settings(config)
        args = training_arguments(config, device, output_dir, has_eval=prepared.eval is not None)
        # An eval batch holds whole groups of completions, as TRL requires.
        args["per_device_eval_batch_size"] = generation["num_generations"]
        trainer_args = GRPOConfig(**args, **generation, beta=beta_for(config), reward_weights=weights)
        return _quiet_trainer_class()(
            model=model,
            reward_funcs=functions,
            args=trainer_args,
            train_dataset=prepared.train,
            eval_dataset=prepared.eval if trainer_args.eval_strategy != "no" else None,
            processing_class=loaded.processing,
            callbacks=callbacks,
        )


def _drop(rows: Any, reference: str | None) -> Any:
    """The rows without the original reference column (it is under `reference` now)."""
    if rows is None or reference in (None, "reference") or reference not in rows.column_names:
        return rows
    return rows.remove_columns([reference])


def _quiet_trainer_class() -> Any:
    from trl import GRPOTrainer

    class QuietGRPOTrainer(GRPOTrainer):
        """TRL's GRPOTrainer logging without QUIET_METRICS (see above); nothing else changes."""

        def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
            for mode in self._metrics.values():
                for name in QUIET_METRICS:
                    mode.pop(name, None)
            super().log(logs, start_time)

    return QuietGRPOTrainer

