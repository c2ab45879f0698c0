"""The speech-to-text family: AutoProcessor (feature extractor + tokenizer) + AutoModelForSpeechSeq2Seq.

Audio + transcript rows go through `data` and its collator, the transcripts' language
settled first (`prefix`: the labels are written with its prefix); transformers'
Seq2SeqTrainer trains, with word error rate at eval (`trainer`). LoRA targets every
linear layer of the encoder and the decoder; the save is the shared one (`text/family.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunelab.worker import lora_targets, model_setup
from tunelab.worker.data import prepare as data
from tunelab.worker.families.protocol import Loaded
from tunelab.worker.families.text.family import TransformersFamily

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


class SpeechFamily(TransformersFamily):
    name = "speech"

    def load(self, config: WorkerConfig, device: Any) -> Loaded:
        from tunelab.worker.families.speech import model as speech_model

        speech_model.check_trainable(config)
        processor = speech_model.load_processor(config)
        model = model_setup.load_model(config, device, speech_model.model_class())
        return Loaded(model, processor.tokenizer, processor)

    def prepare(self, config: WorkerConfig, loaded: Loaded, raw: Any) -> data.PreparedData:
        from tunelab.worker.families.speech import data as speech_data
        from tunelab.worker.families.speech import prefix as speech_prefix

        # The transcripts' language first: the labels are written with its prefix.
        note = speech_prefix.settle(config, loaded.model, loaded.processing, raw)
        prepared = speech_data.prepare(config, loaded.processing, raw, loaded.model.config)
        prepared.notes[:0] = [note] if note else []
        return prepared

    def modality(self, raw: Any) -> str:
        return "speech"

    def targets(self, model: Any, config: WorkerConfig) -> list[str] | None:
        # Every linear layer of the encoder and the decoder; the output head stays as it is.
        return sorted(lora_targets.classify_linear_layers(model))

    def wrap(self, model: Any, config: WorkerConfig, device: Any) -> Any:
        # The finetune_* switches speak of vision and language parts: nothing here to switch.
        # PEFT's plain wrapper: its SEQ_2_SEQ_LM one passes input_ids, which a speech encoder does not take.
        return model_setup.wrap_for_training(model, config, device, self.targets(model, config), task_type=None)

    def build_trainer(self, config: WorkerConfig, device: Any, model: Any, loaded: Loaded, prepared: Any,
                      output_dir: Any, callbacks: list[Any]) -> Any:
        from tunelab.worker.families.speech.trainer import build_speech_trainer

        return build_speech_trainer(config, device, model, loaded.processing, prepared, output_dir, callbacks)
