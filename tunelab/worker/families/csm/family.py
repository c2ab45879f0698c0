"""The Sesame CSM family: transformers' `CsmForConditionalGeneration` trained from text to its own Mimi codes.

Told apart by its config's model_type (`tunelab/families/csm.py`), never its name. It loads
with its `CsmProcessor` (tokenizer + feature extractor), which is saved beside every
checkpoint and the final model, so a finished run or its export reloads with
`AutoProcessor` and speaks through `generate(..., output_audio=True)`. The codec lives in
the model and is saved with it; it never trains — LoRA targets the backbone's and the depth
decoder's linear layers, full fine-tuning freezes the codec. Data: `csm/data.py` (clips
encoded once into the run's codec cache); trainer and sample: `csm/trainer.py`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from tunelab.worker import model_setup
from tunelab.worker.families.protocol import Loaded
from tunelab.worker.families.text.family import TransformersFamily

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

CODEC_PREFIX = "codec_model."


class CsmFamily(TransformersFamily):
    name = "tts"

    def __init__(self) -> None:
        self.codec: Any = None

    def load(self, config: WorkerConfig, device: Any) -> Loaded:
        from transformers import CsmForConditionalGeneration

        from tunelab.worker.context import RunSettingError
        from tunelab.worker.families.csm.model import codec_of, load_processor

        if config.tts_codec:
            raise RunSettingError("tts_codec", f"{config.model_name} is a Sesame CSM model, which speaks through the Mimi codec "
                                               "inside it; tts_codec is for Orpheus-style models: remove it")
        processor = load_processor(config)
        model = model_setup.load_model(config, device, CsmForConditionalGeneration)
        self.codec = codec_of(model)
        return Loaded(model, processor.tokenizer, processor)

    def prepare(self, config: WorkerConfig, loaded: Loaded, raw: Any) -> Any:
        from tunelab.worker.families.csm import data as csm_data

        return csm_data.prepare(config, loaded.processing, loaded.model.config, self.codec, raw, Path(config.output_dir))

    def modality(self, raw: Any) -> str:
        return "tts"

    def targets(self, model: Any, config: WorkerConfig) -> list[str] | None:
        head = model.get_output_embeddings()
        return sorted(name for name, module in model.named_modules()
                      if isinstance(module, torch.nn.Linear) and module is not head and not name.startswith(CODEC_PREFIX))

    def wrap(self, model: Any, config: WorkerConfig, device: Any) -> Any:
        # The finetune_* switches speak of vision and language parts: nothing here to switch.
        # PEFT's plain wrapper passes inputs_embeds and the codebook labels through unchanged.
        model = model_setup.wrap_for_training(model, config, device, self.targets(model, config), task_type=None)
        for name, parameter in model.named_parameters():
            if CODEC_PREFIX in name:
                parameter.requires_grad_(False)  # the codec encodes and decodes; it never learns
        return model

    def build_trainer(self, config: WorkerConfig, device: Any, model: Any, loaded: Loaded, prepared: Any,
                      output_dir: Any, callbacks: list[Any]) -> Any:
        from tunelab.worker.families.csm.trainer import build_csm_trainer

        return build_csm_trainer(config, device, model, loaded.processing, prepared, output_dir, callbacks)
