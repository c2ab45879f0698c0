"""Loading and tokenizing on a thread: the same rows as on the backend's own thread, and
an error in the data raised where the backend asks for it."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from typed_config import typed
from tunelab.worker.data.prepare import DataFormatError, load_raw, prepare
from tunelab.worker.data.prefetch import DataPrefetch


@pytest.fixture(scope="module")
def tokenizer(demo_assets):
    return AutoTokenizer.from_pretrained(demo_assets.model_dir)


def _config(path, **extra):
    return typed({"local_datasets": [str(path)], "eval_steps": 0, "format": "auto", "max_seq_length": 128,
                  "training_type": "lora", **extra})


def test_prefetched_rows_are_the_rows_prepared_in_place(demo_assets, tokenizer, tmp_path):
    config = _config(demo_assets.chatml, train_on_completions=True)
    prefetch = DataPrefetch(config, tokenizer, tmp_path / "a")
    in_place = prepare(typed(config), tokenizer, load_raw(config, tmp_path / "b"))
    assert len(prefetch.raw().train) == len(in_place.train) > 0
    fetched = prefetch.prepared()
    assert fetched.train["input_ids"] == in_place.train["input_ids"]
    assert fetched.train["labels"] == in_place.train["labels"]


def test_bad_data_is_raised_when_the_rows_are_asked_for(demo_assets, tokenizer, tmp_path):
    # Raw text cannot train on completions: refused while tokenizing, on the thread.
    prefetch = DataPrefetch(_config(demo_assets.text, train_on_completions=True), tokenizer, tmp_path)
    assert prefetch.raw().format == "text"
    with pytest.raises(DataFormatError) as err:
        prefetch.prepared()
    assert err.value.field == "train_on_completions"


def test_a_missing_file_is_raised_by_both(tokenizer, tmp_path):
    prefetch = DataPrefetch(_config(tmp_path / "missing.jsonl"), tokenizer, tmp_path / "cache")
    for ask in (prefetch.raw, prefetch.prepared):
        with pytest.raises(Exception) as err:
            ask()
        assert "missing.jsonl" in str(err.value)


def test_only_families_that_prepare_rows_as_text_prefetch():
    """Text-to-speech is a text family with its own data path (codec tokens): it must not
    be prefetched as text rows (it was, and its runs failed on their data)."""
    from tunelab.worker.families.speech.family import SpeechFamily
    from tunelab.worker.families.text.family import TextFamily
    from tunelab.worker.families.vision.family import VisionFamily
    from tunelab.worker.families.tts.family import TtsFamily

    assert TextFamily().prefetches_data
    assert not TtsFamily().prefetches_data
    assert not VisionFamily().prefetches_data and not SpeechFamily().prefetches_data
