"""The text-to-speech family: an Orpheus-style causal LM trained from text to SNAC codec tokens.

It is the text family in every step but three: the data becomes codec-token rows
(`tts/data.py`, encoding each clip once into the run's codec cache), the trainer is
transformers' own with a spoken sample at each eval (`tts/trainer.py`), and the codec's
files are saved as `codec/` in the run's folder as soon as the model loads — so every
checkpoint, the final model and its export carry what decodes their tokens back to sound.
The model's config gets the `tunelab_tts` marker (codec and codebook size), so the saved
model is told apart as TTS from its own files.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunelab.worker import model_setup
from tunelab.worker.families.protocol import Loaded
from tunelab.worker.families.text.family import TextFamily

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


class TtsFamily(TextFamily):
    name = "tts"
    frozen_linears_in_bf16 = False  # its eval samples are generated outside the trainer's autocast

    def __init__(self) -> None:
        self.layout: Any = None
        self.codec: Any = None

    def load(self, config: WorkerConfig, device: Any) -> Loaded:
        from tunelab.worker.launch import ranks
        from tunelab.worker.families.tts.codec import CODEC_SUBFOLDER, load_codec
        from tunelab.worker.families.tts.model import check_codec_matches, layout_of, model_config_dict

        tokenizer = model_setup.load_tokenizer(config)
        self.layout = layout_of(tokenizer, model_config_dict(config))
        self.codec = load_codec(config, cuda=bool(device.cuda))
        check_codec_matches(self.layout, self.codec)
        model = model_setup.load_model(config, device)
        model.config.tunelab_tts = {"codec": "snac", "codebook_size": self.layout.codebook_size}
        if ranks.rank() == 0:
            self.codec.save(Path(config.output_dir) / CODEC_SUBFOLDER)
        return Loaded(model, tokenizer, tokenizer)

    def prepare(self, config: WorkerConfig, loaded: Loaded, raw: Any) -> Any:
        from tunelab.worker.families.tts import data as tts_data

        return tts_data.prepare(config, loaded.tokenizer, self.layout, self.codec, raw, Path(config.output_dir))

    def modality(self, raw: Any) -> str:
        return "tts"

    def build_trainer(self, config: WorkerConfig, device: Any, model: Any, loaded: Loaded, prepared: Any,
                      output_dir: Any, callbacks: list[Any]) -> Any:
        from tunelab.worker.families.tts.trainer import build_tts_trainer

        return build_tts_trainer(config, device, model, loaded.tokenizer, self.layout, self.codec, prepared, output_dir, callbacks)
