"""DPO, ORPO, SimPO and KTO on a text family, with TRL's own trainers.

`PreferenceMethod(family, objective)` wraps a family, delegating its load, targets, wrap
and modality (the `Objective` Protocol, `protocol.py`), and replaces three steps:
  prepare        the preference rows in any shape `preference_formats` recognises, as
                 TRL's conversational preference format split as TRL splits them
                 (`preference_rows.row_turns`): string cells become one user turn
                 (prompt) and one assistant turn (chosen, rejected), so TRL renders
                 every row with the model's chat template; turn lists (role/content,
                 or sharegpt from/value turns) become role/content turns.
  build_trainer  TRL's DPOTrainer, ORPOTrainer or CPOTrainer (loss_type=simpo, no SFT
                 term) or KTOTrainer on the shared Trainer arguments (`trainer_setup.training_arguments`)
                 and the run's callbacks. An adapter run hands DPO its PeftModel and no
                 reference model: TRL then keeps a frozen copy of the fresh adapter
                 (named "ref"; for LoRA it starts as zero, so the reference is the base
                 with the adapter off, and for LoftQ it is the starting point) and scores
                 the reference through it: the base weights are held once.
  save_final     the family's save, without TRL's "ref" adapter: the output is the
                 trained adapter (or full model) and tokenizer, as after an SFT run.
TRL logs rewards/chosen, rewards/rejected, rewards/margins and rewards/accuracies (and
the log-probabilities); the progress callback forwards them as each step's extras.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunelab import families
from tunelab.config.preference import OBJECTIVE_FORMATS, beta_for
from tunelab.worker.data.prepare import PreparedData, ensure_chat_template
from tunelab.worker.data.formats import DataFormatError
from tunelab.worker.families.protocol import Loaded, TrainingFamily
from tunelab.worker.methods.preference_formats import describe_shape
from tunelab.worker.methods.preference_rows import RowPlace, row_turns

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

TRAINERS = {"dpo": "DPOTrainer", "orpo": "ORPOTrainer", "simpo": "CPOTrainer", "kto": "KTOTrainer"}


class PreferenceMethod:
    # Its rows are preference rows, prepared once the model has loaded: never the family's prefetch.
    prefetches_data = False

    def __init__(self, family: TrainingFamily, objective: str):
        if family.name != families.DEFAULT.name:  # the text family: the one these objectives are written for
            raise DataFormatError("objective", f"objective={objective} trains text models here and {family.name} models "
                                               "are not supported yet; use a text model, or objective=sft")
        self.family = family
        self.objective = objective
        self.name = family.name

    # Loading, the adapter's targets, wrapping and the modality are the family's own.
    def load(self, config: WorkerConfig, device: Any) -> Loaded:
        return self.family.load(config, device)

    def modality(self, raw: Any) -> str:
        return self.family.modality(raw)

    def targets(self, model: Any, config: WorkerConfig) -> list[str] | None:
        return self.family.targets(model, config)

    def wrap(self, model: Any, config: WorkerConfig, device: Any) -> Any:
        return self.family.wrap(model, config, device)

    def prepare(self, config: WorkerConfig, loaded: Any, raw: Any) -> PreparedData:
        if raw.format not in OBJECTIVE_FORMATS[self.objective]:
            raise DataFormatError("format", f"objective={self.objective} trains on preference rows and the data is {raw.format} "
                                            f"with columns {raw.train.column_names}; expected {describe_shape()}. Map other names "
                                            "with column_mapping, e.g. {prompt: question, chosen: good_answer, rejected: bad_answer}")
        ensure_chat_template(loaded.tokenizer)
        train = as_conversations(raw.train, config.role_mapping, "training")
        batch = config.batch_size
        if batch > len(train):
            raise DataFormatError("batch_size", f"batch_size {batch} is larger than the {len(train)} training rows; "
                                                f"set batch_size to {len(train)} or less, or add data")
        eval_set = as_conversations(raw.eval, config.role_mapping, "eval") if raw.eval is not None else None
        return PreparedData(train=train, eval=eval_set, format=raw.format)

    def build_trainer(self, config: WorkerConfig, device: Any, model: Any, loaded: Any, prepared: Any,
                      output_dir: Any, callbacks: list[Any]) -> Any:
        from tunelab.worker.trainer_setup import training_arguments

        args = training_arguments(config, device, output_dir, has_eval=prepared.eval is not None)
        trainer_class, config_class, extra = _trl_classes(self.objective)
        trainer_args = config_class(**args, max_length=config.max_seq_length,
                                    beta=beta_for(config), **extra)
        kwargs = {"ref_model": None} if self.objective in ("dpo", "kto") else {}
        return trainer_class(
            model=model,
            args=trainer_args,
            train_dataset=prepared.train,
            eval_dataset=prepared.eval if trainer_args.eval_strategy != "no" else None,
            processing_class=loaded.processing,
            callbacks=callbacks,
            **kwargs,
        )

    def save_final(self, trainer: Any, loaded: Any, output_dir: Any) -> None:
        model = trainer.model
        if "ref" in (getattr(model, "peft_config", None) or {}):
            model.delete_adapter("ref")  # the reference only mattered while training
        self.family.save_final(trainer, loaded, output_dir)


def _trl_classes(objective: str) -> tuple[Any, Any, dict[str, Any]]:
    import os

    # ORPO and CPO live in trl.experimental, which warns on import; the choice is made here, knowingly.
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    if objective == "dpo":
        from trl import DPOConfig, DPOTrainer

        return DPOTrainer, DPOConfig, {}
    if objective == "kto":
        from trl import KTOConfig, KTOTrainer

        return KTOTrainer, KTOConfig, {}
    if objective == "orpo":
        from trl.experimental.orpo import ORPOConfig, ORPOTrainer

        # Their collator reads the prompt/chosen/rejected columns the Trainer would otherwise drop.
        return ORPOTrainer, ORPOConfig, {"remove_unused_columns": False}
    from trl.experimental.cpo import CPOConfig, CPOTrainer

    # SimPO as TRL defines it: the CPO trainer with the SimPO loss and no SFT term.
    return CPOTrainer, CPOConfig, {"loss_type": "simpo", "cpo_alpha": 0.0, "remove_unused_columns": False}


def as_conversations(rows: Any, role_mapping: dict[str, str] | None, what: str) -> Any:
    """The rows in TRL's conversational preference format (`preference_rows.row_turns`)."""
    return rows.map(lambda row, index: row_turns(row, role_mapping, RowPlace(index, what)), with_indices=True,
                    remove_columns=rows.column_names, desc="Reading preference rows")
