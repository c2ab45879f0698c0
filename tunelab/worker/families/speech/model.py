"""Telling a speech-to-text model from the others, and loading one with its processor.

A model is speech-to-text when its own config says so — never its name: its model type
maps to `AutoModelForSpeechSeq2Seq` (or remote code registers that auto class) and it
is an encoder-decoder (Whisper, Speech2Text, Moonshine ...). The decoder-only audio
models in that mapping (audio chat models such as Voxtral) are refused with a clear
message until their own path lands. The tests are the family spec's
(`tunelab/families/speech.py`: a raw config.json is read against a list of model types
kept equal to transformers' mapping by a test).
Such a model loads through `AutoModelForSpeechSeq2Seq` with its `AutoProcessor`
(feature extractor + tokenizer). The language of the transcripts (Whisper's prefix tokens
<|startoftranscript|><|lang|><|transcribe|><|notimestamps|>) is settled once the data is read,
for the labels, eval and the saved generation_config alike (`speech_prefix`); `speech_language`
is checked here, before the model loads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunelab.families import speech
from tunelab.worker.context import RunSettingError
from tunelab.worker.hub_config import load_auto_processor, model_config_or_none
from tunelab.worker.families.speech.prefix import check_setting

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


def check_trainable(config: WorkerConfig) -> None:
    """A speech model this path cannot train yet is refused before it loads, in its config's words."""
    model_config = model_config_or_none(config)
    if model_config is not None and not getattr(model_config, "is_encoder_decoder", False):
        raise RunSettingError("model_name", f"{config.model_name} is a {model_config.model_type} audio model without a separate "
                                            "encoder and decoder; tunelab trains encoder-decoder speech-to-text models "
                                            "(Whisper, Speech2Text, Moonshine) so far")


def eval_rows(config: WorkerConfig, processor: Any, model: Any, raw: Any) -> Any:
    """The eval child's rows for its loss (its spec's `processor` names this module): the
    eval split prepared as training prepares its rows (`data.prepare`)."""
    from tunelab.worker.families.speech.data import prepare

    return prepare(config, processor, raw, model.config)


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
    """The class the family spec names (`speech.SPEC.auto_class`)."""
    import transformers

    return getattr(transformers, speech.SPEC.auto_class)
