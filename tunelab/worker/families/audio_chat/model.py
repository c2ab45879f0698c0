"""Telling an audio chat model from the others, and loading one with its processor.

An audio chat model is a language model that listens: an audio encoder whose features a
projector puts in place of the audio tokens of a chat (Qwen2-Audio). It is recognised by
its own config — never its name: an audio encoder sub-config (`audio_config`) beside a
language model (`text_config`), and no vision sub-config. Models that also see images
(Gemma 3n) have one and stay with the vision-language family; encoder-decoder speech models
(Whisper) are the speech family's, checked first. `config_dict_is_audio_chat` answers for a
raw config.json without importing transformers (the parent's start checks use it).
Such a model loads through `AutoModelForMultimodalLM` with its `AutoProcessor` (a feature
extractor, a tokenizer with the model's audio token, and the chat template); a processor
without those three is refused before training, saying what is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunelab.worker.context import RunSettingError
from tunelab.worker.hub_config import load_auto_processor, model_config_or_none, set_up_chat_tokenizer

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

# The mlx backend's answer for such a model: no maintained MLX package trains one here.
MLX_REFUSAL = ("is an audio chat model (an audio encoder in front of a language model), and the mlx backend trains "
               "text models only (no maintained MLX package for audio chat training installs on this platform); use backend=torch")


def config_dict_is_audio_chat(config: dict[str, Any]) -> bool:
    """The test on a raw config.json (for callers that must not import transformers)."""
    return (isinstance(config.get("audio_config"), dict) and isinstance(config.get("text_config"), dict)
            and not isinstance(config.get("vision_config"), dict) and not config.get("is_encoder_decoder"))


def is_audio_chat_config(model_config: Any) -> bool:
    return (getattr(model_config, "audio_config", None) is not None and getattr(model_config, "text_config", None) is not None
            and getattr(model_config, "vision_config", None) is None and not getattr(model_config, "is_encoder_decoder", False))


def is_audio_chat_model(config: WorkerConfig) -> bool:
    """Whether the run's `model_name` is an audio chat model (reads only its config)."""
    model_config = model_config_or_none(config)
    return model_config is not None and is_audio_chat_config(model_config)


def load_processor(config: WorkerConfig) -> Any:
    name = config.model_name
    processor = load_auto_processor(config, "an audio chat model",
                                    "processor_config.json or preprocessor_config.json, and the tokenizer")
    missing = [what for what, ok in (("a feature extractor", getattr(processor, "feature_extractor", None) is not None),
                                     ("a tokenizer", getattr(processor, "tokenizer", None) is not None),
                                     ("an audio token", isinstance(getattr(processor, "audio_token", None), str)))
               if not ok]
    if missing:
        raise RunSettingError("model_name", f"{name} is an audio chat model but its processor ({type(processor).__name__}) has no "
                                            f"{' and no '.join(missing)}; save the model together with its AutoProcessor")
    tokenizer = set_up_chat_tokenizer(processor)
    if not getattr(processor, "chat_template", None):
        raise RunSettingError("model_name", f"{name}'s processor has no chat template, and audio chat rows are rendered with "
                                            "it; save the model with one (chat_template.jinja)")
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = processor.chat_template  # text-only rows render as the audio rows do
    return processor


def model_class() -> Any:
    from transformers import AutoModelForMultimodalLM

    return AutoModelForMultimodalLM
