"""One language/task prefix for a multilingual Whisper: the labels, eval's generation, the saved
generation_config and an adapter run's export all start <|startoftranscript|><|lang|><|transcribe|><|notimestamps|>
with the same language — detected from the clips when nothing names it, else speech_language or
the tokenizer's own. The tiny Whisper is the speech demo's, its tokenizer's language removed as
openai's multilingual checkpoints ship it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from typed_config import typed
from tunelab.worker.context import RunSettingError

START, TRANSCRIBE, NO_TIMESTAMPS = "<|startoftranscript|>", "<|transcribe|>", "<|notimestamps|>"


def _copy(assets, folder: Path, *, tokenizer: dict | None = None, generation: dict | None = None) -> Path:
    """The demo Whisper with some tokenizer_config / generation_config fields replaced."""
    shutil.copytree(assets.model_dir, folder)
    for name, changes in (("tokenizer_config.json", tokenizer), ("generation_config.json", generation)):
        if changes:
            path = folder / name
            path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return folder


@pytest.fixture
def open_whisper(speech_assets, tmp_path) -> Path:
    return _copy(speech_assets, tmp_path / "whisper-open", tokenizer={"language": None, "task": None})


@pytest.fixture
def rows(speech_assets, tmp_path) -> Path:
    lines = [json.loads(line) for line in speech_assets.transcripts.read_text().splitlines()[:4]]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({**row, "audio": str(speech_assets.data_dir / row["audio"])}) + "\n" for row in lines))
    return path


def _prepare(model_dir: Path, data: Path, cache: Path, **settings):
    """What the worker does: the processor and model load, then the speech family prepares the rows."""
    from transformers import AutoModelForSpeechSeq2Seq

    from tunelab.worker.families.protocol import Loaded
    from tunelab.worker.families.speech.family import SpeechFamily
    from tunelab.worker.data.sources import load_raw
    from tunelab.worker.families.speech.model import load_processor

    config = typed({"model_name": str(model_dir), "local_datasets": [str(data)], "batch_size": 2, **settings})
    processor = load_processor(config)
    model = AutoModelForSpeechSeq2Seq.from_pretrained(model_dir)
    prepared = SpeechFamily().prepare(typed(config), Loaded(model, processor.tokenizer, processor), load_raw(typed(config), cache))
    return model, processor, prepared


def _started(model, features, **kwargs) -> list[int]:
    """The tokens generation forces before its first own one (kept in the dict output's sequences)."""
    return model.generate(features, max_new_tokens=1, return_dict_in_generate=True, **kwargs).sequences[0, :4].tolist()


def test_a_detected_language_is_one_prefix_for_labels_eval_the_saved_config_and_the_export(open_whisper, rows, tmp_path):
    from transformers import AutoModelForSpeechSeq2Seq, AutoProcessor, GenerationConfig
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    from tunelab.worker.families.speech.collator import decode_clip
    from tunelab.worker.families.speech.prefix import carry_to_generation, generation_kwargs

    model, processor, prepared = _prepare(open_whisper, rows, tmp_path / "cache")
    tokenizer = processor.tokenizer
    prefix = prepared.train[0]["labels"][:4]
    start, language, task, no_timestamps = tokenizer.convert_ids_to_tokens(prefix)
    code = language.removeprefix("<|").removesuffix("|>")
    assert (start, task, no_timestamps) == (START, TRANSCRIBE, NO_TIMESTAMPS) and code in LANGUAGES
    assert prepared.notes[0].startswith(f"Transcripts start {start}{language}{task}{no_timestamps} ")
    assert "speech_language is not set: the model hears " + code in prepared.notes[0]
    clip = decode_clip(prepared.train[0]["audio"], 16000)
    features = processor.feature_extractor([clip], sampling_rate=16000, return_tensors="pt").input_features
    # Eval's generate (told what the trainer tells it) and a plain generate, as a pipeline calls it.
    assert _started(model, features, **generation_kwargs(model)) == prefix == _started(model, features)
    # A full run's save writes the prefix into generation_config.json; the reloaded model starts the same way.
    model.save_pretrained(tmp_path / "saved")
    saved = GenerationConfig.from_pretrained(tmp_path / "saved")
    assert (saved.language, saved.task) == (code, "transcribe")
    assert _started(AutoModelForSpeechSeq2Seq.from_pretrained(tmp_path / "saved"), features) == prefix
    # An adapter run's export: the base's generation_config, given the prefix of the tokenizer saved with the run.
    processor.save_pretrained(tmp_path / "run")
    base = AutoModelForSpeechSeq2Seq.from_pretrained(open_whisper)
    assert getattr(base.generation_config, "language", None) is None
    carry_to_generation(base, AutoProcessor.from_pretrained(tmp_path / "run"))
    assert _started(base, features) == prefix


def test_speech_language_or_the_tokenizers_own_language_sets_the_prefix(speech_assets, open_whisper, rows, tmp_path):
    model, processor, prepared = _prepare(open_whisper, rows, tmp_path / "cache", speech_language="German")
    assert processor.tokenizer.convert_ids_to_tokens(prepared.train[0]["labels"][:4]) == [START, "<|de|>", TRANSCRIBE, NO_TIMESTAMPS]
    assert (model.generation_config.language, model.generation_config.task) == ("de", "transcribe")
    assert prepared.notes[0].endswith("(speech_language German)")
    # The demo's tokenizer was saved with language en: that is the run's language.
    model, processor, prepared = _prepare(speech_assets.model_dir, rows, tmp_path / "cache")
    assert processor.tokenizer.convert_ids_to_tokens(prepared.train[0]["labels"][:2]) == [START, "<|en|>"]
    assert model.generation_config.language == "en" and "saved with" in prepared.notes[0]


def test_an_unknown_language_and_speech_language_on_an_english_only_model_are_refused(speech_assets, open_whisper, rows, tmp_path):
    from tunelab.worker.families.speech.model import load_processor

    with pytest.raises(RunSettingError) as caught:
        load_processor(typed({"model_name": str(open_whisper), "speech_language": "klingon"}))  # before the model loads
    assert caught.value.field == "speech_language" and "'klingon' is not a language Whisper knows" in caught.value.message
    english_only = _copy(speech_assets, tmp_path / "whisper-en", generation={"is_multilingual": False})  # its tokenizer says en
    with pytest.raises(RunSettingError) as caught:
        _prepare(english_only, rows, tmp_path / "cache", speech_language="de")
    assert caught.value.field == "speech_language" and "English-only" in caught.value.message
    # Without it, an English-only model's labels carry no language or task token, whatever its tokenizer was saved with.
    _, processor, prepared = _prepare(english_only, rows, tmp_path / "cache")
    assert processor.tokenizer.convert_ids_to_tokens(prepared.train[0]["labels"][:2]) == [START, NO_TIMESTAMPS]
