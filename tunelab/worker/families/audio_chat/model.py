"""Telling an audio chat model from the others, and loading one with its processor.

An audio chat model is a language model that listens: an audio encoder whose features a
projector puts in place of the audio tokens of a chat (Qwen2-Audio). It is recognised by
its own config — never its name: an audio encoder sub-config (`audio_config`) beside a
language model (`text_config`), and no vision sub-config. Models that also see images
(Gemma 3n) have one and stay with the vision-language family; encoder-decoder speech models
(Whisper) are the speech family's, checked first. The tests are the family spec's
(`tunelab/families/audio_chat.py`), for parent and child alike.
Such a model loads through `AutoModelForMultimodalLM` with its `AutoProcessor` (a feature
extractor, a tokenizer with the model's audio token, and the chat template); a processor
without those three is refused before training, saying what is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunelab.families import audio_chat
from tunelab.worker.context import RunSettingError
from tunelab.worker.hub_config import load_auto_processor, set_up_chat_tokenizer

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


def eval_rows(config: dict[str, Any], processor: Any, model: Any, raw: Any) -> Any:
    """The eval child's rows for its loss (its spec's `processor` names this module): the
    eval split prepared as training prepares its rows (`data.prepare`)."""
    from tunelab.worker.families.audio_chat.data import prepare

    return prepare(config, processor, raw)


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
    """The class the family spec names (`audio_chat.SPEC.auto_class`)."""
    import transformers

    return getattr(transformers, audio_chat.SPEC.auto_class)
