"""The audio chat family: a language model that listens (Qwen2-Audio), trained on chat
messages with audio parts as the vision family trains on image parts.

It differs from the vision family in what the media are and in what trains by default:
  load      `AutoProcessor` (feature extractor + tokenizer with the audio token + chat
            template) and `AutoModelForMultimodalLM` (`audio_chat/model.py`).
  prepare   rows with audio (chat with audio parts, or audio with its transcript) through
            `audio_chat/data.py` and its collator; a dataset without audio trains the model as a
            language model, exactly as the text family would; image data is refused, saying
            what was expected.
  wrap      the language model's linear layers (the attention/MLP switches choose among
            them); the audio tower and its projector stay frozen unless
            `finetune_audio_layers` is on — a pretrained encoder already hears, and its
            features are what the language model learns to read. Full fine-tuning trains
            every weight but those.
Training (TRL's SFTTrainer), saving (weights + the whole processor) and resuming are the
vision family's, so stop-and-save, resume and export behave as for vision runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunelab.worker import lora_targets, model_setup

from tunelab.worker.data import prepare as data
from tunelab.worker.context import RunSettingError
from tunelab.worker.families.protocol import Loaded
from tunelab.worker.families.text.family import TransformersFamily

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


def audio_switches(config: WorkerConfig) -> dict[str, Any]:
    """The run's switches as `lora_targets` reads them: the part outside the language model is
    the audio tower and projector, on only with `finetune_audio_layers`."""
    switches = config.model_copy(update={"finetune_vision_layers": config.finetune_audio_layers})
    if not (switches.finetune_vision_layers or config.finetune_language_layers):
        raise RunSettingError("finetune_audio_layers", "finetune_language_layers is false and finetune_audio_layers is false, "
                                                       "which trains nothing of an audio chat model; turn one on")
    return switches


class AudioChatFamily(TransformersFamily):
    name = "audio_chat"

    def load(self, config: WorkerConfig, device: Any) -> Loaded:
        from tunelab.worker.families.audio_chat import model as audio_chat_model

        processor = audio_chat_model.load_processor(config)
        model = model_setup.load_model(config, device, audio_chat_model.model_class())
        return Loaded(model, processor.tokenizer, processor)

    def prepare(self, config: WorkerConfig, loaded: Loaded, raw: Any) -> data.PreparedData:
        from tunelab.worker.families.audio_chat import data as audio_chat_data

        audio_chat_data.check_shape(config, raw)
        if not audio_chat_data.raw_has_audio(raw):
            return data.prepare(config, loaded.tokenizer, raw)
        return audio_chat_data.prepare(config, loaded.processing, raw)

    def modality(self, raw: Any) -> str:
        """What the run trains on: rows with audio make it "audio_chat"; without them it is a language model."""
        from tunelab.worker.families.audio_chat import data as audio_chat_data

        return "audio_chat" if audio_chat_data.raw_has_audio(raw) else "text"

    def targets(self, model: Any, config: WorkerConfig) -> list[str] | None:
        return lora_targets.select_targets(model, audio_switches(config))

    def wrap(self, model: Any, config: WorkerConfig, device: Any) -> Any:
        switches = audio_switches(config)
        model = model_setup.wrap_for_training(model, config, device, self.targets(model, config))
        if config.training_type not in ("lora", "qlora"):
            lora_targets.freeze_switched_off(model, switches)  # the audio tower stays as it is unless switched on
        return model
