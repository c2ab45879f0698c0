"""The text family, and the shared base of the families whose model is a transformers model.

`TransformersFamily` is what the families of transformers models share (all but embedding): `wrap`
puts the method's adapter on the family's `targets`, or for full fine-tuning trains the
weights the finetune_* switches leave on; `build_trainer` is TRL's SFTTrainer
(`text/sft_trainer.py`); `save_final` saves the weights and the processing class (tokenizer or
processor) beside them, so a finished run reloads with AutoTokenizer / AutoProcessor.
Each family supplies `load`, `prepare`, `modality` and `targets` (the `TrainingFamily`
Protocol, `protocol.py`) and replaces whichever shared step it trains differently.

`TextFamily`: tokenizer + AutoModelForCausalLM; rows through `data.prepare` and TRL's
collator, prepared on a thread while the model loads (`prefetches_data`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunelab.worker import lora_targets, model_setup
from tunelab.worker.data import prepare as data
from tunelab.worker.families.protocol import Loaded

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


class TransformersFamily:
    """The shared steps; a family class built on it supplies load, prepare, modality and targets."""

    name: str
    # Whether its SFT batches may go padding-free on a CPU (rows of token ids only; the
    # families with their own collators, or with 3-D position ids, keep padding).
    padding_free_on_cpu = False
    # Whether its data needs only the tokenizer, so the backend may prepare it while the
    # model loads (`load_tokenizer` first, then `load` reuses that tokenizer).
    prefetches_data = False
    # Whether the model is called only inside the trainer's autocast (no samples generated
    # beside it), so a bf16 CPU run may hold its frozen linear weights in bf16 from the start
    # (`model_setup.store_frozen_linears_in_bf16`).
    frozen_linears_in_bf16 = False

    def wrap(self, model: Any, config: WorkerConfig, device: Any) -> Any:
        """The model ready to train: an adapter on the family's targets, or every weight the
        switches leave on for full fine-tuning."""
        model = model_setup.wrap_for_training(model, config, device, self.targets(model, config))
        if config.training_type not in ("lora", "qlora") and not lora_targets.switches_at_default(config):
            lora_targets.freeze_switched_off(model, config)
        if self.frozen_linears_in_bf16:
            model_setup.store_frozen_linears_in_bf16(config, device, model)
        return model

    def build_trainer(self, config: WorkerConfig, device: Any, model: Any, loaded: Loaded, prepared: Any,
                      output_dir: Any, callbacks: list[Any]) -> Any:
        from tunelab.worker.families.text.sft_trainer import build_sft_trainer

        padding_free = self.padding_free_on_cpu and model_setup.padding_free_batches(config, device)
        return build_sft_trainer(config, device, model, loaded.processing, prepared, output_dir, callbacks, padding_free)

    def save_final(self, trainer: Any, loaded: Loaded, output_dir: Any) -> None:
        trainer.save_model(str(output_dir))  # every rank takes part (FSDP gathers); the Trainer writes from one
        if trainer.args.should_save:
            loaded.processing.save_pretrained(str(output_dir))  # the tokenizer, or the whole processor


class TextFamily(TransformersFamily):
    name = "text"
    padding_free_on_cpu = True
    frozen_linears_in_bf16 = True
    _tokenizer: Any = None

    @property
    def prefetches_data(self) -> bool:  # type: ignore[override]
        # Only where the rows are prepared as here: a subclass with its own `prepare`
        # (text-to-speech, over codec tokens) needs its model before its data.
        return type(self).prepare is TextFamily.prepare

    def load_tokenizer(self, config: WorkerConfig) -> Any:
        self._tokenizer = model_setup.load_tokenizer(config)
        return self._tokenizer

    def load(self, config: WorkerConfig, device: Any) -> Loaded:
        tokenizer = self._tokenizer or self.load_tokenizer(config)
        padding_free = model_setup.padding_free_batches(config, device)
        return Loaded(model_setup.load_model(config, device, padding_free=padding_free), tokenizer, tokenizer)

    def prepare(self, config: WorkerConfig, loaded: Loaded, raw: Any) -> data.PreparedData:
        return data.prepare(config, loaded.tokenizer, raw)

    def modality(self, raw: Any) -> str:
        return "text"

    def targets(self, model: Any, config: WorkerConfig) -> list[str] | None:
        # At their defaults the switches leave the text path's own default targets.
        return None if lora_targets.switches_at_default(config) else lora_targets.select_targets(model, config)
