"""Telling a vision-language model from a text model, and loading one with its processor.

A model is vision-language when its own config says so — never its name: its model
type maps to `AutoModelForImageTextToText`, remote code registers that auto class, or
the config carries a vision sub-config. Detection is torch-free (the mlx backend and
the parent's start checks use it too). Such a model loads through
`AutoModelForImageTextToText` with its `AutoProcessor` (image processor + tokenizer +
chat template); image processors fall back to their PIL backend where torchvision is
missing, which it is with a CPU-only torch.
"""

from __future__ import annotations

from typing import Any

from tunelab.worker.context import RunSettingError

# The mlx backend's answer for such a model: no maintained MLX package trains one here.
MLX_REFUSAL = ("is a vision-language model, and the mlx backend trains text models only (no maintained MLX "
               "package for vision-language training installs on this platform); use backend=torch")


def config_dict_is_vision(config: dict[str, Any]) -> bool:
    """The same test on a raw config.json (for callers that must not import transformers)."""
    return isinstance(config.get("vision_config"), dict) or "AutoModelForImageTextToText" in (config.get("auto_map") or {})


def _hub_kwargs(config: dict[str, Any]) -> dict[str, Any]:
    return {"token": config.get("hf_token") or None, "trust_remote_code": bool(config.get("trust_remote_code"))}


def is_vision_config(model_config: Any) -> bool:
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    if getattr(model_config, "model_type", None) in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        return True
    if "AutoModelForImageTextToText" in (getattr(model_config, "auto_map", None) or {}):
        return True
    return getattr(model_config, "vision_config", None) is not None


def is_vision_model(config: dict[str, Any]) -> bool:
    """Whether the run's `model_name` is a vision-language model (reads only its config)."""
    from transformers import AutoConfig

    try:
        model_config = AutoConfig.from_pretrained(config["model_name"], **_hub_kwargs(config))
    except (OSError, ValueError, KeyError):
        return False  # the model load reports the real problem, in its own words
    return is_vision_config(model_config)


def load_processor(config: dict[str, Any]) -> Any:
    from transformers import AutoProcessor, ProcessorMixin

    try:
        processor = AutoProcessor.from_pretrained(config["model_name"], **_hub_kwargs(config))
    except (OSError, ValueError) as exc:
        raise RunSettingError("model_name", f"{config['model_name']} is a vision-language model but its processor does not load ({exc}); "
                                       "the model folder needs its processor files (preprocessor_config.json / processor_config.json)") from exc
    if not isinstance(processor, ProcessorMixin) or getattr(processor, "tokenizer", None) is None:
        raise RunSettingError("model_name", f"{config['model_name']} is a vision-language model but ships no processor with a tokenizer; "
                                       "save the model together with its AutoProcessor")
    tokenizer = processor.tokenizer
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    tokenizer.padding_side = "right"  # the collator's label alignment reads each row from its start
    if not getattr(processor, "chat_template", None) and getattr(tokenizer, "chat_template", None):
        processor.chat_template = tokenizer.chat_template
    return processor


def model_class() -> Any:
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText
