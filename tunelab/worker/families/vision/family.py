"""The vision-language family: AutoProcessor + AutoModelForImageTextToText (`model`).

Image rows (an image column, or image parts in the conversations) go through `data` and
its collator; a dataset without images trains the model as a language model, exactly as
the text family would. Wrapping (the finetune_vision/language/attention/mlp switches
choose the targets), TRL's SFTTrainer and the save (weights + the whole processor) are
the shared ones (`text/family.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunelab.worker import lora_targets, model_setup
from tunelab.worker.data import prepare as data
from tunelab.worker.families.protocol import Loaded
from tunelab.worker.families.text.family import TransformersFamily

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


class VisionFamily(TransformersFamily):
    name = "vision"

    def load(self, config: WorkerConfig, device: Any) -> Loaded:
        from tunelab.worker.families.vision import model as vision_model

        processor = vision_model.load_processor(config)
        model = model_setup.load_model(config, device, vision_model.model_class())
        return Loaded(model, processor.tokenizer, processor)

    def prepare(self, config: WorkerConfig, loaded: Loaded, raw: Any) -> data.PreparedData:
        from tunelab.worker.families.vision import data as vision_data

        if not vision_data.has_images(raw):
            vision_data.refuse_placeholders_without_images(raw)
            return data.prepare(config, loaded.tokenizer, raw)
        return vision_data.prepare(config, loaded.processing, raw)

    def modality(self, raw: Any) -> str:
        """What the run trains on: image rows (an image column or image parts) make it "vision";
        without them it is a language model."""
        from tunelab.worker.families.vision import data as vision_data

        return "vision" if vision_data.has_images(raw) else "text"

    def targets(self, model: Any, config: WorkerConfig) -> list[str] | None:
        return lora_targets.select_targets(model, config)
