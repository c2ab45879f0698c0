"""Text-to-speech pieces in-process: Orpheus's frame layout round-trips SNAC's codes; a TTS
model is told from its files (never its name) and mlx refuses it; text + audio (+ speaker)
rows read as transcription data and become prompt-masked codec-token rows, from a codec
cache that a second preparation reuses without encoding a clip."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile

from typed_config import typed
from tunelab.demos.tts import ensure_tts_demo_assets
from tunelab.worker.families.tts import layout as tts_layout


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
    from tunelab.worker.families import registry as model_family

    renamed = tmp_path / "whisper-small"  # the name says speech-to-text; the files say TTS
    shutil.copytree(tts_assets.model_dir, renamed)
    assert type(model_family.detect(typed({"model_name": str(renamed)}))).__name__ == "TtsFamily"
    assert "text-to-speech" in mlx_model_problem(str(renamed)) and "backend=torch" in mlx_model_problem(str(renamed))
    # Without the marker, Orpheus's audio range in the tokenizer still says TTS ...
    config = json.loads((renamed / "config.json").read_text())
    del config[tts_layout.MARKER]
    (renamed / "config.json").write_text(json.dumps(config))
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text(json.dumps({"added_tokens": [{"content": tts_layout.token_name(n)} for n in (10, 10 + 7 * 4096 - 1)]}))
    assert tts_layout.config_dict_is_tts(config, tokenizer) and not tts_layout.config_dict_is_tts(config, None)
    assert type(model_family.detect(typed({"model_name": str(renamed)}))).__name__ == "TextFamily"  # 7 x 64 is not Orpheus's range
    # ... and the plain text demo model is text.
    assert type(model_family.detect(typed({"model_name": str(demo_assets.model_dir)}))).__name__ == "TextFamily"


def test_rows_become_masked_codec_tokens_and_the_cache_is_reused(tts_assets, speech_assets, tmp_path):
    from tunelab.worker import model_setup
    from tunelab.worker.data.sources import load_raw
    from tunelab.worker.families.tts.codec import load_codec
    from tunelab.worker.families.tts.data import IGNORE_INDEX, prepare
    from tunelab.worker.families.tts.model import layout_of, model_config_dict

    lines = speech_assets.transcripts.read_text().splitlines()[:4]
    rows = [{**json.loads(line), "speaker": "tara" if i == 0 else None} for i, line in enumerate(lines)]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({**row, "audio": str(speech_assets.data_dir / row["audio"])}) + "\n" for row in rows))
    config = typed({"model_name": str(tts_assets.model_dir), "local_datasets": [str(data)], "batch_size": 2, "max_seq_length": 512})
    raw = load_raw(typed(config), tmp_path / "cache")
    assert raw.format == "transcription"  # text + audio (+ speaker) columns
    tokenizer = model_setup.load_tokenizer(config)
    layout = layout_of(tokenizer, model_config_dict(typed(config)))
    codec = load_codec(config)
    calls = []
    encode = codec.encode
    codec.encode = lambda samples: calls.append(1) or encode(samples)
    first = prepare(typed(config), tokenizer, layout, codec, raw, tmp_path / "out")
    assert len(calls) == 4 and first.notes[0].startswith("Encoded 4 training clips to codec tokens")
    row = first.train[0]
    # Orpheus's layout (tests/speech/test_orpheus_layout.py checks it id for id): the demo tokenizer adds no BOS itself.
    prompt = [layout.control["start_of_human"], tokenizer.bos_token_id, *tokenizer(f"tara: {rows[0]['text']}").input_ids,
              tokenizer.eos_token_id] + [layout.control[name] for name in ("end_of_human", "start_of_ai", "start_of_speech")]
    assert row["input_ids"][:len(prompt)] == prompt and row["labels"][:len(prompt)] == [IGNORE_INDEX] * len(prompt)
    audio = row["input_ids"][len(prompt):-2]
    assert audio and len(audio) % 7 == 0 and row["labels"][len(prompt):] == row["input_ids"][len(prompt):]
    assert row["input_ids"][-2:] == [layout.control["end_of_speech"], layout.control["end_of_ai"]]
    again = prepare(typed(config), tokenizer, layout, codec, load_raw(typed(config), tmp_path / "cache"), tmp_path / "out")
    assert len(calls) == 4 and again.notes[0].startswith("Reused the codec tokens of 4 training clips")
    assert again.train["input_ids"] == first.train["input_ids"]
    # A row too long for max_seq_length names the row and both fixes: its text alone, ...
    from tunelab.worker.data.formats import DataFormatError

    with pytest.raises(DataFormatError) as caught:
        prepare(typed(config, max_seq_length=20), tokenizer, layout, codec, raw, tmp_path / "out")
    assert caught.value.field == "max_seq_length" and caught.value.message.startswith("row 0 of the training data: its text alone is ")
    # ... its cached codes, or (before encoding) its clip.
    with pytest.raises(DataFormatError) as caught:
        prepare(typed(config, max_seq_length=60), tokenizer, layout, codec, raw, tmp_path / "out")
    assert caught.value.field == "max_seq_length" and caught.value.message.startswith("row 0 of the training data is ")
    with pytest.raises(DataFormatError) as caught:
        prepare(typed(config, max_seq_length=60), tokenizer, layout, codec, raw, tmp_path / "fresh")
    assert caught.value.field == "local_datasets" and "max_seq_length 60 (raise it for longer clips)" in caught.value.message
    assert len(calls) == 4  # refused before a clip was encoded


def _bad_rows(assets, tmp_path: Path, kinds: tuple[str, ...], good_rows: int = 1) -> Path:
    """`good_rows` good clips, then one row per kind of bad clip: missing, garbage, empty, long (60 s)."""
    good = json.loads(assets.transcripts.read_text().splitlines()[0])
    rows = [{"audio": str(assets.data_dir / good["audio"]), "text": good["text"]}] * good_rows
    (tmp_path / "clips").mkdir(exist_ok=True)
    for kind in kinds:
        clip = tmp_path / "clips" / f"{kind}.wav"
        if kind == "garbage":
            clip.write_bytes(b"RIFF this is no audio at all" * 10)
        elif kind == "empty":
            soundfile.write(clip, np.zeros(0, dtype=np.float32), 16000)
        elif kind == "long":
            soundfile.write(clip, np.zeros(16000 * 60, dtype=np.float32), 16000)
        rows.append({"audio": f"clips/{kind}.wav", "text": "one two"})
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return data


@pytest.fixture(scope="module")
def tts_parts(tts_assets):
    """The tiny TTS model's tokenizer, layout and codec (encode calls counted in `codec.calls`)."""
    from tunelab.worker import model_setup
    from tunelab.worker.families.tts.codec import load_codec
    from tunelab.worker.families.tts.model import layout_of, model_config_dict

    config = typed({"model_name": str(tts_assets.model_dir)})
    tokenizer = model_setup.load_tokenizer(config)
    codec = load_codec(config)
    codec.calls = []
    encode = codec.encode
    codec.encode = lambda samples: codec.calls.append(1) or encode(samples)
    return tokenizer, layout_of(tokenizer, model_config_dict(typed(config))), codec


def _prepare(tts_assets, tts_parts, data: Path, out: Path, **settings):
    from tunelab.worker.data.sources import load_raw
    from tunelab.worker.families.tts.data import prepare

    config = typed({"model_name": str(tts_assets.model_dir), "local_datasets": [str(data)], "batch_size": 1, "max_seq_length": 512, **settings})
    return prepare(typed(config), *tts_parts, load_raw(typed(config), out / "cache"), out)


@pytest.mark.parametrize("kind, says", [("missing", "does not exist"), ("garbage", "cannot be read"), ("empty", "is empty"),
                                        ("long", "is 60.0 s long and max_seq_length 512 (raise it for longer clips) leaves this row's audio at most")])
def test_a_bad_tts_clip_is_reported_with_row_and_path_before_any_clip_is_encoded(tts_assets, tts_parts, speech_assets, tmp_path, kind, says):
    from tunelab.worker.data.formats import DataFormatError

    data = _bad_rows(speech_assets, tmp_path, (kind,))
    before = len(tts_parts[2].calls)
    with pytest.raises(DataFormatError) as caught:
        _prepare(tts_assets, tts_parts, data, tmp_path / "out")
    assert caught.value.field == "local_datasets" and len(tts_parts[2].calls) == before  # the good row 0 was not encoded
    message = caught.value.message
    assert message.startswith(f"row 1 of the training data: audio {tmp_path / 'clips' / (kind + '.wav')} (column 'audio') ")
    assert says in message and message.endswith("or set skip_bad_audio=true to skip such rows")


def test_skip_bad_audio_leaves_out_and_counts_bad_tts_clips_also_from_the_cache(tts_assets, tts_parts, speech_assets, tmp_path,
                                                                               monkeypatch):
    from tunelab.worker.preview.child import build_preview
    from tunelab.worker.data.formats import DataFormatError

    data = _bad_rows(speech_assets, tmp_path, ("missing", "garbage", "empty", "long"), good_rows=2)
    calls = tts_parts[2].calls
    before = len(calls)
    first = _prepare(tts_assets, tts_parts, data, tmp_path / "out", skip_bad_audio=True)
    clips = tmp_path / "clips"
    note = (f"Skipped 4 of 6 training rows whose audio is missing, unreadable, empty or too long (skip_bad_audio): "
            f"row 2 ({clips / 'missing.wav'}: missing), row 3 ({clips / 'garbage.wav'}: unreadable), "
            f"row 4 ({clips / 'empty.wav'}: empty), row 5 ({clips / 'long.wav'}: longer than ")
    assert len(first.train) == 2 and len(calls) == before + 2 and first.notes[0].startswith("Encoded 2 training clips")
    assert first.notes[1].startswith(note)
    # A resumed run (same folder) reads the skipped rows from the cache, and says so again.
    again = _prepare(tts_assets, tts_parts, data, tmp_path / "out", skip_bad_audio=True)
    assert len(calls) == before + 2 and again.notes[0].startswith("Reused the codec tokens of 2 training clips")
    assert again.notes[1] == first.notes[1] and again.train["input_ids"] == first.train["input_ids"]
    # Without the setting the same cache does not hide the bad rows.
    with pytest.raises(DataFormatError) as caught:
        _prepare(tts_assets, tts_parts, data, tmp_path / "out")
    assert caught.value.message.startswith(f"row 2 of the training data: audio {clips / 'missing.wav'} ")
    # A bad eval clip is found before any training clip is encoded.
    (tmp_path / "eval").mkdir()
    (tmp_path / "train").mkdir()
    eval_data, train_data = _bad_rows(speech_assets, tmp_path / "eval", ("missing",), good_rows=0), _bad_rows(speech_assets, tmp_path / "train", ())
    with pytest.raises(DataFormatError) as caught:
        _prepare(tts_assets, tts_parts, train_data, tmp_path / "out2", local_eval_datasets=[str(eval_data)], eval_steps=1)
    assert caught.value.field == "local_eval_datasets" and len(calls) == before + 2
    assert caught.value.message.startswith(f"row 0 of the eval data: audio {tmp_path / 'eval' / 'clips' / 'missing.wav'} ")
    # The dataset check counts them too: the too-long clip by the TTS model's max_seq_length and codec.
    monkeypatch.setenv("TUNELAB_DATA_ROOTS", f"{speech_assets.root}{os.pathsep}{tmp_path}")
    config = typed({"local_datasets": [str(data)], "format": "auto", "max_seq_length": 512})
    counted = {model: build_preview(typed(config), 2, model, tmp_path / "cache")["bad_audio_rows"] for model in (None, str(tts_assets.model_dir))}
    assert counted == {None: 3, str(tts_assets.model_dir): 4}
