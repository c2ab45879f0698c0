"""Telling a speech-to-text model from the others, and loading one with its processor.

A model is speech-to-text when its own config says so — never its name: its model type
maps to `AutoModelForSpeechSeq2Seq` (or remote code registers that auto class) and it
is an encoder-decoder (Whisper, Speech2Text, Moonshine ...). The decoder-only audio
models in that mapping (audio chat models such as Voxtral) are refused with a clear
message until their own path lands. `config_dict_is_speech` answers for a raw
config.json without importing transformers (the parent's start checks use it), from a
list of model types kept equal to transformers' mapping by a test.
Such a model loads through `AutoModelForSpeechSeq2Seq` with its `AutoProcessor`
(feature extractor + tokenizer). The language of the transcripts (Whisper's prefix tokens
<|startoftranscript|><|lang|><|transcribe|><|notimestamps|>) is settled once the data is read,
for the labels, eval and the saved generation_config alike (`speech_prefix`); `speech_language`
is checked here, before the model loads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunelab.worker.context import RunSettingError
from tunelab.worker.hub_config import load_auto_processor, model_config_or_none
from tunelab.worker.families.speech.prefix import check_setting

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

# transformers 5.24's MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES (tests/speech checks it).
SPEECH_SEQ2SEQ_TYPES = (
    "canary", "cohere_asr", "dia", "fun_asr_nano", "granite_speech", "granite_speech_plus", "kyutai_speech_to_text",
    "moonshine", "moonshine_streaming", "omniasr", "pop2piano", "qwen3_asr", "seamless_m4t", "seamless_m4t_v2",
    "speech-encoder-decoder", "speech_to_text", "speecht5", "vibevoice", "vibevoice_asr", "voxtral", "voxtral_realtime",
    "whisper",
)
AUTO_CLASS = "AutoModelForSpeechSeq2Seq"
# The mlx backend's answer for such a model: no maintained MLX package trains one here.
MLX_REFUSAL = ("is a speech-to-text model, and the mlx backend trains text models only (no maintained MLX package "
               "for speech-to-text training installs on this platform); use backend=torch")


def config_dict_is_speech(config: dict[str, Any]) -> bool:
    """The test on a raw config.json (for callers that must not import transformers)."""
    return config.get("model_type") in SPEECH_SEQ2SEQ_TYPES or AUTO_CLASS in (config.get("auto_map") or {})


def is_speech_config(model_config: Any) -> bool:
    from transformers.models.auto.modeling_auto import MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES

    return (getattr(model_config, "model_type", None) in MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES
            or AUTO_CLASS in (getattr(model_config, "auto_map", None) or {}))


def is_speech_model(config: WorkerConfig) -> bool:
    """Whether the run's `model_name` is a speech model (reads only its config)."""
    model_config = model_config_or_none(config)
    return model_config is not None and is_speech_config(model_config)


def check_trainable(config: WorkerConfig) -> None:
    """A speech model this path cannot train yet is refused before it loads, in its config's words."""
    model_config = model_config_or_none(config)
    if model_config is not None and not getattr(model_config, "is_encoder_decoder", False):
        raise RunSettingError("model_name", f"{config.model_name} is a {model_config.model_type} audio model without a separate "
                                            "encoder and decoder; tunelab trains encoder-decoder speech-to-text models "
                                            "(Whisper, Speech2Text, Moonshine) so far")


def load_processor(config: WorkerConfig) -> Any:
    name = config.model_name
    processor = load_auto_processor(config, "a speech-to-text model", "preprocessor_config.json and the tokenizer")
    if getattr(processor, "feature_extractor", None) is None or getattr(processor, "tokenizer", None) is None:
        raise RunSettingError("model_name", f"{name} is a speech-to-text model but ships no processor with a feature extractor and "
                                            "a tokenizer; save the model together with its AutoProcessor")
    tokenizer = processor.tokenizer
    check_setting(config, tokenizer)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    return processor


def model_class() -> Any:
    from transformers import AutoModelForSpeechSeq2Seq

    return AutoModelForSpeechSeq2Seq
