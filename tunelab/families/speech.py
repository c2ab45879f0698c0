"""The speech-to-text family: told from the model's own config, never its name.

A model is speech-to-text when its model type maps to `AutoModelForSpeechSeq2Seq` (or
remote code registers that auto class): Whisper, Speech2Text, Moonshine ... A raw
config.json is read against `SPEECH_SEQ2SEQ_TYPES`, a copy of transformers' mapping kept
equal to it by a test; a child with a loaded config asks transformers' mapping itself. Such a
model transcribes: its runs are evaluated for word error rate, not chatted with, and
llama.cpp's converter does not take its encoder-decoder.
"""

from __future__ import annotations

from typing import Any, Mapping

from tunelab.families.spec import FamilySpec, ModelFiles

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


def config_dict_is_speech(config: Mapping[str, Any]) -> bool:
    """The test on a raw config.json (for callers that must not import transformers)."""
    return config.get("model_type") in SPEECH_SEQ2SEQ_TYPES or AUTO_CLASS in (config.get("auto_map") or {})


def is_speech_config(model_config: Any) -> bool:
    """The test on transformers' config object, against transformers' own mapping."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES

    return (getattr(model_config, "model_type", None) in MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES
            or AUTO_CLASS in (getattr(model_config, "auto_map", None) or {}))


def _matches(files: ModelFiles) -> bool:
    if files.transformers:
        return files.model_config is not None and is_speech_config(files.model_config)
    return config_dict_is_speech(files.config)


SPEC = FamilySpec(
    name="speech", modality="speech", words="a speech-to-text model", matches=_matches, auto_class=AUTO_CLASS,
    backends=("torch",), refusal=MLX_REFUSAL, gguf=False, serves="transcribe", processor="tunelab.worker.families.speech.model",
    chat_refusal=("run {run_id} trained a speech-to-text model, which transcribes audio rather than answering a chat; "
                  "evaluate it for its word error rate (`tunelab eval {run_id}`, or Evaluate on the page), or export "
                  "it and load it as an automatic-speech-recognition pipeline"),
    page_no_chat=("A speech-to-text model transcribes audio rather than answering a chat: Evaluate reports its word error "
                  "rate on the eval clips, and its export loads as a speech-recognition pipeline."),
    demo="speech", demo_builder="tunelab.demos.speech", settings=("speech_language",), build="encoder-decoder")
