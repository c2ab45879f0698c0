"""One language and task prefix for a speech-to-text run: its labels, its eval transcripts and its saved generation_config.

A multilingual Whisper starts every transcript <|startoftranscript|><|lang|><|transcribe|><|notimestamps|>.
Its tokenizer writes the language token into the labels only when it is told a language,
while `generate` (and transformers' automatic-speech-recognition pipeline) detects each clip's
language when none is set: a run that left the language open trained on
<|startoftranscript|><|notimestamps|> and was scored and used with <|lang|><|transcribe|>.
So `settle` picks the language once, before any label is made:
  1. `speech_language` when set (a name or a code: "german" or "de");
  2. else the language the tokenizer was saved with (a fine-tuned Whisper's tokenizer_config.json,
     as tunelab saves every run's);
  3. else the language the model itself hears in the first DETECT_CLIPS training clips — Whisper's
     own detection, the one `generate` would run — when more than half of them agree; when they
     do not, the run is refused, asking for speech_language.
and sets it, with the task `transcribe`, on the tokenizer (the labels) and on the model's
generation_config (eval's `generate`, and the generation_config.json every full save writes).
The run reports the prefix it chose, and why, as a note.
An English-only Whisper (`is_multilingual: false`) has no language or task token in its
generation, so none in its labels either, and speech_language is refused; so it is for a model
whose tokenizer has no language prefix at all (Speech2Text, Moonshine: `check_setting`), and for
a generation_config too old to name languages (no `lang_to_id`), which is left as it is.
`carry_to_generation` puts the prefix a saved tokenizer holds into a loaded model's
generation_config: the merged export of an adapter run (whose base's generation_config knows
nothing of the run) transcribes with the prefix it trained on.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from tunelab.worker.context import RunSettingError

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

TASK = "transcribe"  # tunelab trains transcripts; Whisper's other task, translate, needs other labels
DETECT_CLIPS = 8


def language_code(name: str) -> str:
    """Whisper's code for a language given by code, name or token ("de", "German", "<|de|>")."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES, TO_LANGUAGE_CODE

    key = name.strip().lower().removeprefix("<|").removesuffix("|>")
    if key in LANGUAGES:
        return key
    if key in TO_LANGUAGE_CODE:
        return TO_LANGUAGE_CODE[key]
    raise RunSettingError("speech_language", f"{name!r} is not a language Whisper knows; give its code or its name, e.g. en or english, de or german")


def has_prefix(tokenizer: Any) -> bool:
    return hasattr(tokenizer, "set_prefix_tokens")


def check_setting(config: WorkerConfig, tokenizer: Any) -> None:
    """speech_language refused before the model loads: on a tokenizer without a language prefix, or unknown."""
    language = config.speech_language
    if not language:
        return
    if not has_prefix(tokenizer):
        raise RunSettingError("speech_language", f"{config.model_name}'s tokenizer has no language prefix to set; remove speech_language")
    language_code(language)


def _multilingual(generation: Any) -> bool:
    return bool(getattr(generation, "lang_to_id", None)) and getattr(generation, "is_multilingual", None) is not False


def _set_generation(generation: Any, code: str) -> None:
    generation.language, generation.task = code, TASK
    generation.forced_decoder_ids = None  # superseded by language + task; original checkpoints carry both


def settle(config: WorkerConfig, model: Any, processor: Any, raw: Any) -> str | None:
    """Decide the run's language (see the module's words), set it on the tokenizer and the model's
    generation_config; returns the note that says so (None when there is nothing to settle)."""
    from tunelab.worker.families.speech.formats import TRANSCRIPTION

    tokenizer, generation = processor.tokenizer, getattr(model, "generation_config", None)
    if not has_prefix(tokenizer) or generation is None or raw.format != TRANSCRIPTION:
        return None  # nothing to settle, or data the preparation refuses next
    if not _multilingual(generation):
        _without_language(config, tokenizer, generation)
        return None
    chosen = _chosen(config, model, processor, raw)
    if chosen is None:
        return None  # no training clip reads: the preparation that follows names the rows
    code, why = chosen
    if f"<|{code}|>" not in generation.lang_to_id:
        raise RunSettingError("speech_language", f"{config.model_name} has no <|{code}|> token; choose one of its languages")
    tokenizer.set_prefix_tokens(language=code, task=TASK)
    _set_generation(generation, code)
    prefix = "".join(tokenizer.convert_ids_to_tokens(tokenizer.prefix_tokens))
    return f"Transcripts start {prefix} in the labels, the eval transcripts and the saved generation_config ({why})"


def _without_language(config: WorkerConfig, tokenizer: Any, generation: Any) -> None:
    """A model whose generation takes no language: speech_language is refused, and an English-only
    model's labels start as its generation does, <|startoftranscript|><|notimestamps|>."""
    english_only = getattr(generation, "is_multilingual", None) is False
    if config.speech_language:
        why = ("is an English-only model: its transcripts carry no language token" if english_only else
               "has a generation_config.json that names no languages (lang_to_id), so its generation cannot be told one")
        raise RunSettingError("speech_language", f"{config.model_name} {why}; remove speech_language")
    if english_only:
        tokenizer.language = tokenizer.task = None
        tokenizer.set_prefix_tokens()


def _chosen(config: WorkerConfig, model: Any, processor: Any, raw: Any) -> tuple[str, str] | None:
    """The language's code and why it is the one: the setting, the tokenizer's own, or what the model hears."""
    setting, saved = config.speech_language, processor.tokenizer.language
    if setting:
        return language_code(setting), f"speech_language {setting}"
    if saved:
        return language_code(saved), "the language its tokenizer was saved with; set speech_language to change it"
    heard = _heard(config, model, processor, raw)
    if not heard:
        return None
    (code, count), total = heard.most_common(1)[0], sum(heard.values())
    if count * 2 <= total:
        found = ", ".join(f"{lang} {n}" for lang, n in heard.most_common())
        raise RunSettingError("speech_language", f"speech_language is not set and {config.model_name} hears different languages in "
                                                 f"the first {total} training clips ({found}); set speech_language to the transcripts' language (e.g. en)")
    return code, f"speech_language is not set: the model hears {code} in {count} of the first {total} training clips; set speech_language to choose another"


def _heard(config: WorkerConfig, model: Any, processor: Any, raw: Any) -> Counter:
    """The language Whisper detects in each of the first readable training clips, counted.
    A bad clip is skipped under skip_bad_audio and otherwise refused, as the preparation would."""
    import torch

    from tunelab.worker.families.speech.collator import decode_clip
    from tunelab.worker.families.speech.data import SKIP_HINT, BadAudioRow, checked_clip, clip_place, longest_seconds
    from tunelab.worker.families.speech.formats import audio_column

    rows, extractor = raw.train, processor.feature_extractor
    rate, column = int(extractor.sampling_rate), audio_column(raw.train.column_names)
    place, longest = clip_place(config, "training", column), longest_seconds(extractor)
    clips = []
    for index in range(len(rows)):
        if len(clips) == DETECT_CLIPS:
            break
        try:
            ref = checked_clip(rows[index][column], index, place, longest, SKIP_HINT)
        except BadAudioRow:
            if not config.skip_bad_audio:
                raise
            continue
        clips.append(decode_clip(ref, rate))
    if not clips:
        return Counter()
    features = extractor(clips, sampling_rate=rate, return_tensors="pt").input_features
    dtype = next(model.get_encoder().parameters()).dtype  # the first convolution: never quantised
    with torch.no_grad():
        ids = model.detect_language(input_features=features.to(model.device, dtype)).tolist()
    return Counter(token.removeprefix("<|").removesuffix("|>") for token in processor.tokenizer.convert_ids_to_tokens(ids))


def generation_kwargs(model: Any) -> dict[str, Any]:
    """What eval's `generate` is told, so its transcripts start as the labels do."""
    generation = getattr(model, "generation_config", None)
    language = getattr(generation, "language", None)
    return {"language": language, "task": getattr(generation, "task", None) or TASK} if language else {}


def carry_to_generation(model: Any, processing: Any) -> None:
    """A loaded model's generation_config given the prefix its saved tokenizer trained with."""
    tokenizer = getattr(processing, "tokenizer", processing)
    generation = getattr(model, "generation_config", None)
    language = getattr(tokenizer, "language", None) if has_prefix(tokenizer) else None
    if language and generation is not None and _multilingual(generation):
        _set_generation(generation, language_code(language))
