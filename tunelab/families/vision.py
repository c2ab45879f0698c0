"""The vision-language family: told from the model's own config, never its name.

A model is vision-language when its model type maps to `AutoModelForImageTextToText`,
remote code registers that auto class, or the config carries a vision sub-config. A raw
config.json (the parent's start checks) answers the last two; a child that loaded the
config through transformers asks transformers' mapping too. Such a model loads through
`AutoModelForImageTextToText` with its `AutoProcessor`; its chats carry images; its vision
tower is loaded but not trained, which the memory estimate counts.
"""

from __future__ import annotations

from typing import Any, Mapping

from tunelab.families.spec import FamilySpec, ModelFiles

AUTO_CLASS = "AutoModelForImageTextToText"
# The mlx backend's answer for such a model: no maintained MLX package trains one here.
MLX_REFUSAL = ("is a vision-language model, and the mlx backend trains text models only (no maintained MLX "
               "package for vision-language training installs on this platform); use backend=torch")


def config_dict_is_vision(config: Mapping[str, Any]) -> bool:
    """The test on a raw config.json (for callers that must not import transformers)."""
    return isinstance(config.get("vision_config"), dict) or AUTO_CLASS in (config.get("auto_map") or {})


def is_vision_config(model_config: Any) -> bool:
    """The test on transformers' config object (a child, which has transformers)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    if getattr(model_config, "model_type", None) in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        return True
    if AUTO_CLASS in (getattr(model_config, "auto_map", None) or {}):
        return True
    return getattr(model_config, "vision_config", None) is not None


def _matches(files: ModelFiles) -> bool:
    if files.transformers:
        return files.model_config is not None and is_vision_config(files.model_config)
    return config_dict_is_vision(files.config)


SPEC = FamilySpec(name="vision", modality="vision", words="a vision-language model", matches=_matches,
                  auto_class=AUTO_CLASS, backends=("torch",), refusal=MLX_REFUSAL, media="image",
                  processor="tunelab.worker.families.vision.model", demo="vision", demo_builder="tunelab.demos.vision",
                  frozen_tower="vision_config", settings=("vision_image_size", "finetune_vision_layers"))
