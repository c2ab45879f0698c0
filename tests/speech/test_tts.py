"""Text-to-speech pieces in-process: Orpheus's frame layout round-trips SNAC's codes; a TTS
model is told from its files (never its name) and mlx refuses it; text + audio (+ speaker)
rows read as transcription data and become prompt-masked codec-token rows, from a codec
cache that a second preparation reuses without encoding a clip."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tunelab.tts_demo import ensure_tts_demo_assets
from tunelab.worker import tts_layout


@pytest.fixture(scope="module")
def tts_assets(speech_assets, tmp_path_factory):
    return ensure_tts_demo_assets(speech_assets.transcripts, tmp_path_factory.mktemp("tts") / "assets")


def test_frames_interleave_as_orpheus_and_come_back():
    coarse, mid, fine = [1, 2], [10, 11, 12, 13], [20, 21, 22, 23, 24, 25, 26, 27]
    offsets = tts_layout.frames_to_offsets(coarse, mid, fine, 100)
    # Place p of a frame is offset by p * K; Orpheus's order: c, m, f, f, m, f, f.
    assert offsets[:7] == [1, 110, 220, 321, 411, 522, 623]
    assert tts_layout.offsets_to_codes(offsets + [5, 105], 100) == (coarse, mid, fine)  # a partial frame is dropped


def test_a_tts_model_is_told_from_its_files_and_mlx_refuses_it(tts_assets, demo_assets, tmp_path):
    from tunelab.orchestrator.prechecks import mlx_model_problem
    from tunelab.worker import model_family

    renamed = tmp_path / "whisper-small"  # the name says speech-to-text; the files say TTS
    shutil.copytree(tts_assets.model_dir, renamed)
    assert type(model_family.detect({"model_name": str(renamed)})).__name__ == "TtsFamily"
    assert "text-to-speech" in mlx_model_problem(str(renamed)) and "backend=torch" in mlx_model_problem(str(renamed))
    # Without the marker, Orpheus's audio range in the tokenizer still says TTS ...
    config = json.loads((renamed / "config.json").read_text())
    del config[tts_layout.MARKER]
    (renamed / "config.json").write_text(json.dumps(config))
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text(json.dumps({"added_tokens": [{"content": tts_layout.token_name(n)} for n in (10, 10 + 7 * 4096 - 1)]}))
    assert tts_layout.config_dict_is_tts(config, tokenizer) and not tts_layout.config_dict_is_tts(config, None)
    assert type(model_family.detect({"model_name": str(renamed)})).__name__ == "TextFamily"  # 7 x 64 is not Orpheus's range
    # ... and the plain text demo model is text.
    assert type(model_family.detect({"model_name": str(demo_assets.model_dir)})).__name__ == "TextFamily"


def test_rows_become_masked_codec_tokens_and_the_cache_is_reused(tts_assets, speech_assets, tmp_path):
    from tunelab.worker import model_setup
    from tunelab.worker.sources import load_raw
    from tunelab.worker.tts_codec import load_codec
    from tunelab.worker.tts_data import IGNORE_INDEX, prepare
    from tunelab.worker.tts_model import layout_of, model_config_dict

    lines = speech_assets.transcripts.read_text().splitlines()[:4]
    rows = [{**json.loads(line), "speaker": "tara" if i == 0 else None} for i, line in enumerate(lines)]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({**row, "audio": str(speech_assets.data_dir / row["audio"])}) + "\n" for row in rows))
    config = {"model_name": str(tts_assets.model_dir), "local_datasets": [str(data)], "batch_size": 2, "max_seq_length": 512}
    raw = load_raw(config, tmp_path / "cache")
    assert raw.format == "transcription"  # text + audio (+ speaker) columns
    tokenizer = model_setup.load_tokenizer(config)
    layout = layout_of(tokenizer, model_config_dict(config))
    codec = load_codec(config)
    calls = []
    encode = codec.encode
    codec.encode = lambda samples: calls.append(1) or encode(samples)
    first = prepare(config, tokenizer, layout, codec, raw, tmp_path / "out")
    assert len(calls) == 4 and first.notes[0].startswith("Encoded 4 training clips to codec tokens")
    row = first.train[0]
    prompt = [layout.control["start_of_human"]] + tokenizer(f"tara: {rows[0]['text']}").input_ids + [
        layout.control[name] for name in ("end_of_human", "start_of_ai", "start_of_speech")]
    assert row["input_ids"][:len(prompt)] == prompt and row["labels"][:len(prompt)] == [IGNORE_INDEX] * len(prompt)
    audio = row["input_ids"][len(prompt):-2]
    assert audio and len(audio) % 7 == 0 and row["labels"][len(prompt):] == row["input_ids"][len(prompt):]
    assert row["input_ids"][-2:] == [layout.control["end_of_speech"], layout.control["end_of_ai"]]
    again = prepare(config, tokenizer, layout, codec, load_raw(config, tmp_path / "cache"), tmp_path / "out")
    assert len(calls) == 4 and again.notes[0].startswith("Reused the codec tokens of 4 training clips")
    assert again.train["input_ids"] == first.train["input_ids"]
    # A row too long for max_seq_length names the row and both fixes.
    from tunelab.worker.formats import DataFormatError

    with pytest.raises(DataFormatError) as caught:
        prepare({**config, "max_seq_length": 20}, tokenizer, layout, codec, raw, tmp_path / "out")
    assert caught.value.field == "max_seq_length" and caught.value.message.startswith("row 0 of the training data is ")
