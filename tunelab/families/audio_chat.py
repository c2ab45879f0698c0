"""The audio chat family: a language model that listens (Qwen2-Audio), told from its config.

An audio encoder sub-config (`audio_config`) beside a language model (`text_config`), no
vision sub-config and no encoder-decoder: models that also see images (Gemma 3n) stay
vision-language, and encoder-decoder speech models (Whisper) are the speech family's, asked
first. Such a model loads through `AutoModelForMultimodalLM` with its `AutoProcessor`; its
chats carry audio clips. llama.cpp's converter does not take its audio tower.
"""

from __future__ import annotations

from typing import Any, Mapping

from tunelab.families.spec import FamilySpec, ModelFiles

# The mlx backend's answer for such a model: no maintained MLX package trains one here.
MLX_REFUSAL = ("is an audio chat model (an audio encoder in front of a language model), and the mlx backend trains "
               "text models only (no maintained MLX package for audio chat training installs on this platform); use backend=torch")


def config_dict_is_audio_chat(config: Mapping[str, Any]) -> bool:
    """The test on a raw config.json (for callers that must not import transformers)."""
    return (isinstance(config.get("audio_config"), dict) and isinstance(config.get("text_config"), dict)
            and not isinstance(config.get("vision_config"), dict) and not config.get("is_encoder_decoder"))


def is_audio_chat_config(model_config: Any) -> bool:
    """The same test on transformers' config object."""
    return (getattr(model_config, "audio_config", None) is not None and getattr(model_config, "text_config", None) is not None
            and getattr(model_config, "vision_config", None) is None and not getattr(model_config, "is_encoder_decoder", False))


def _matches(files: ModelFiles) -> bool:
    if files.transformers:
        return files.model_config is not None and is_audio_chat_config(files.model_config)
    return config_dict_is_audio_chat(files.config)


SPEC = FamilySpec(name="audio_chat", modality="audio_chat", words="an audio chat model", matches=_matches,
                  auto_class="AutoModelForMultimodalLM", backends=("torch",), refusal=MLX_REFUSAL, gguf=False,
                  media="audio", processor="tunelab.worker.families.audio_chat.model", settings=("finetune_audio_layers",),
                  build="audio tower and language model")
