"""Speech data in-process: the shapes `format: auto` names transcription, every bad clip
reported before training with its row, path and field, decoding and resampling batch by
batch, Whisper's labels (prefix handled, -100 on padding), and how a speech model is
told from its config (for the worker, the mlx refusal and export)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile

from typed_config import typed
from tunelab.worker.data.formats import DataFormatError
from tunelab.worker.data.sources import load_raw
from tunelab.worker.families.speech.collator import IGNORE_INDEX, decode_clip
from tunelab.worker.families.speech.data import prepare


def _config(assets, data: Path, **overrides):
    return typed({"model_name": str(assets.model_dir), "local_datasets": [str(data)], "batch_size": 2, **overrides})


def _model_config(assets):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(assets.model_dir)


def _prepared(assets, processor, data: Path, cache: Path, **overrides):
    config = _config(assets, data, **overrides)
    return prepare(typed(config), processor, load_raw(typed(config), cache), _model_config(assets))


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_audio_and_transcript_columns_are_detected_in_the_shapes_people_publish(speech_assets, tmp_path):
    cache = tmp_path / "cache"
    assert load_raw(typed(_config(speech_assets, speech_assets.transcripts)), cache).format == "transcription"
    # file_name holds .wav paths, so it is the audio; sentence is the transcript.
    assert load_raw(typed(_config(speech_assets, speech_assets.transcripts_csv)), cache).format == "transcription"
    # A code dataset's path column names no audio: it stays text data.
    code = _jsonl(tmp_path / "code.jsonl", [{"path": "src/a.py", "text": "print(1)"}] * 3)
    assert load_raw(typed(_config(speech_assets, code)), cache).format == "text"
    # Audio without a transcript says what it expected and what it saw.
    bare = _jsonl(tmp_path / "bare.jsonl", [{"audio": "clips/000.wav", "speaker": "a"}] * 3)
    with pytest.raises(DataFormatError) as caught:
        load_raw(typed(_config(speech_assets, bare)), cache)
    assert caught.value.field == "column_mapping" and "'audio'" in str(caught.value) and "speaker" in str(caught.value)
    # column_mapping names any other transcript column.
    mapped = _jsonl(tmp_path / "mapped.jsonl", [{"audio": "x.wav", "words": "one two"}] * 3)
    assert load_raw(typed(_config(speech_assets, mapped, column_mapping={"text": "words"})), cache).format == "transcription"


def test_a_parquet_audio_feature_is_read_as_bytes_without_decoding(speech_assets, speech_processor, tmp_path):
    """A hub/parquet audio feature holds the clip's bytes; it is never decoded by datasets
    (that needs torchcodec), only by soundfile, batch by batch."""
    import datasets

    rows = [json.loads(line) for line in speech_assets.transcripts.read_text().splitlines()[:6]]
    table = datasets.Dataset.from_dict({
        "audio": [{"bytes": (speech_assets.data_dir / row["audio"]).read_bytes(), "path": Path(row["audio"]).name} for row in rows],
        "sentence": [row["text"] for row in rows],
    }).cast_column("audio", datasets.Audio())
    parquet = tmp_path / "clips.parquet"
    table.to_parquet(str(parquet))
    prepared = _prepared(speech_assets, speech_processor, parquet, tmp_path / "cache")
    assert prepared.format == "transcription" and len(prepared.train) == 6
    first = prepared.train[0]
    assert first["audio"]["bytes"] and first["audio"]["path"] == Path(rows[0]["audio"]).name
    batch = prepared.collator([prepared.train[i] for i in range(2)])
    assert tuple(batch["input_features"].shape) == (2, 80, 300)  # 80 mel bins over the 3 s window


def _bad_clip_rows(assets, tmp_path: Path, kind: str) -> Path:
    good = str((assets.data_dir / "clips" / "000.wav").resolve())
    clip = tmp_path / "clips" / f"{kind}.wav"
    clip.parent.mkdir(exist_ok=True)
    if kind == "garbage":
        clip.write_bytes(b"RIFF this is no audio at all" * 10)
    elif kind == "empty":
        soundfile.write(clip, np.zeros(0, dtype=np.float32), 16000)
    elif kind == "long":
        soundfile.write(clip, np.zeros(16000 * 4, dtype=np.float32), 16000)  # 4 s > the 3 s window
    return _jsonl(tmp_path / f"{kind}.jsonl", [{"audio": good, "text": "one"}, {"audio": f"clips/{kind}.wav", "text": "two"},
                                                {"audio": good, "text": "three"}])


@pytest.mark.parametrize("kind, says", [("missing", "does not exist"), ("garbage", "cannot be read"),
                                        ("empty", "is empty"), ("long", "is 4.0 s long and the model's feature extractor takes at most 3 s")])
def test_a_bad_clip_is_reported_with_its_row_path_and_field_before_training(speech_assets, speech_processor, tmp_path, kind, says):
    data = _bad_clip_rows(speech_assets, tmp_path, kind)
    with pytest.raises(DataFormatError) as caught:
        _prepared(speech_assets, speech_processor, data, tmp_path / "cache")
    message = caught.value.message
    assert caught.value.field == "local_datasets"
    assert message.startswith(f"row 1 of the training data: audio {tmp_path / 'clips' / (kind + '.wav')} (column 'audio') ")
    assert says in message and message.endswith("or set skip_bad_audio=true to skip such rows")


def test_skip_bad_audio_drops_counts_and_names_the_bad_rows(speech_assets, speech_processor, tmp_path):
    good = str((speech_assets.data_dir / "clips" / "000.wav").resolve())
    for kind in ("garbage", "empty", "long"):
        _bad_clip_rows(speech_assets, tmp_path, kind)  # writes clips/<kind>.wav
    rows = [{"audio": good, "text": "one"}] * 2 + [{"audio": f"clips/{k}.wav", "text": "two"} for k in ("missing", "garbage", "empty", "long")]
    data = _jsonl(tmp_path / "rows.jsonl", rows)
    prepared = _prepared(speech_assets, speech_processor, data, tmp_path / "cache", skip_bad_audio=True)
    assert len(prepared.train) == 2 and prepared.train[1]["audio"]["path"] == good
    clips = tmp_path / "clips"
    assert prepared.notes == [f"Skipped 4 of 6 training rows whose audio is missing, unreadable, empty or too long (skip_bad_audio): "
                              f"row 2 ({clips / 'missing.wav'}: missing), row 3 ({clips / 'garbage.wav'}: unreadable), "
                              f"row 4 ({clips / 'empty.wav'}: empty), row 5 ({clips / 'long.wav'}: longer than 3 s)"]
    # Every row bad is still an error: there is nothing to train on.
    with pytest.raises(DataFormatError) as refused:
        _prepared(speech_assets, speech_processor, _jsonl(tmp_path / "bad.jsonl", rows[2:]), tmp_path / "cache", skip_bad_audio=True)
    assert refused.value.field == "local_datasets"
    assert refused.value.message.startswith("every one of the 4 training rows has audio that cannot train (skip_bad_audio skipped them all), "
                                            f"e.g. row 0: {clips / 'missing.wav'}: missing")


def test_in_a_served_run_a_clip_outside_the_data_roots_is_refused(speech_assets, speech_processor, home, tmp_path, monkeypatch):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    shutil.copy(speech_assets.data_dir / "clips" / "000.wav", data_dir / "inside.wav")
    outside = str((speech_assets.data_dir / "clips" / "001.wav").resolve())
    data = _jsonl(data_dir / "rows.jsonl", [{"audio": "inside.wav", "text": "one"}, {"audio": outside, "text": "two"}])
    monkeypatch.setenv("TUNELAB_DATA_ROOTS", str(data_dir))
    monkeypatch.setenv("TUNELAB_CONFINE_READS", "1")
    with pytest.raises(DataFormatError) as caught:  # refused, never skipped
        _prepared(speech_assets, speech_processor, data, tmp_path / "cache", skip_bad_audio=True)
    assert caught.value.message.startswith("row 1 of the training data: audio ") and "outside the folders tunelab may read" in caught.value.message


def test_clips_are_resampled_to_the_extractors_rate(speech_assets, tmp_path):
    t = np.arange(44100) / 44100
    soundfile.write(tmp_path / "stereo.flac", np.stack([np.sin(2 * np.pi * 440 * t)] * 2, axis=1).astype(np.float32), 44100)
    samples = decode_clip({"path": str(tmp_path / "stereo.flac"), "bytes": None}, 16000)
    assert samples.dtype == np.float32 and samples.shape == (16000,)  # 1 s, mono, at 16 kHz
    spectrum = np.abs(np.fft.rfft(samples))
    assert abs(int(np.argmax(spectrum)) - 440) <= 1  # the tone is still 440 Hz


def test_labels_carry_whispers_prefix_once_and_no_loss_on_padding(speech_assets, speech_processor, tmp_path):
    from transformers import AutoModelForSpeechSeq2Seq

    data = _jsonl(tmp_path / "rows.jsonl", [{"audio": str((speech_assets.data_dir / "clips" / "000.wav").resolve()), "text": text}
                                            for text in ("one two three four", "five")])
    prepared = _prepared(speech_assets, speech_processor, data, tmp_path / "cache")
    tokenizer = speech_processor.tokenizer
    ids = tokenizer.convert_tokens_to_ids
    start = ids("<|startoftranscript|>")
    prefix = [ids("<|en|>"), ids("<|transcribe|>"), ids("<|notimestamps|>")]
    assert prepared.train[1]["labels"][:4] == [start] + prefix  # as the tokenizer writes them
    labels = prepared.collator([prepared.train[0], prepared.train[1]])["labels"]
    short = labels[1].tolist()
    # The start token is the model's decoder_start_token_id: cut, or it would be there twice.
    end = short.index(tokenizer.eos_token_id)
    assert short[:3] == prefix and tokenizer.decode(short[3:end]) == "five"
    assert end < len(short) - 1 and set(short[end + 1:]) == {IGNORE_INDEX} and IGNORE_INDEX not in labels[0].tolist()
    model = AutoModelForSpeechSeq2Seq.from_pretrained(speech_assets.model_dir)
    from transformers.models.whisper.modeling_whisper import shift_tokens_right

    decoder_input = shift_tokens_right(labels, model.config.pad_token_id, model.config.decoder_start_token_id)
    assert decoder_input[1, :4].tolist() == [start] + prefix


def test_a_speech_model_is_told_from_its_config(speech_assets, tmp_path):
    from transformers.models.auto.modeling_auto import MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES

    from tunelab.orchestrator.prechecks import mlx_model_problem
    from tunelab.worker.families import registry as model_family

    # The torch-free list the parent's checks use is transformers' own mapping.
    from tunelab.families import speech as speech_model

    # The torch-free list the parent's checks use is transformers' own mapping.
    assert set(speech_model.SPEECH_SEQ2SEQ_TYPES) == set(MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES)
    # Detection reads the config, never the name: the same model under a text-sounding name.
    renamed = tmp_path / "llama-chat-7b"
    shutil.copytree(speech_assets.model_dir, renamed)
    assert isinstance(model_family.detect(typed({"model_name": str(renamed)})), model_family.TRAINING["speech"])
    assert speech_model.config_dict_is_speech(json.loads((renamed / "config.json").read_text()))
    problem = mlx_model_problem(str(renamed))
    assert problem is not None and "speech-to-text model" in problem and "backend=torch" in problem


def test_the_dataset_check_shows_each_rows_clip_and_transcript_and_counts_bad_clips(speech_assets, home, tmp_path, monkeypatch):
    from tunelab.worker.preview.child import build_preview

    # The preview serves HTTP: like training in a served run, it reads clips in the data roots only.
    monkeypatch.setenv("TUNELAB_DATA_ROOTS", f"{speech_assets.root}{os.pathsep}{tmp_path}")

    preview = build_preview(typed({"local_datasets": [str(speech_assets.transcripts_csv)], "format": "auto"}), 2, None, tmp_path / "cache")
    first = speech_assets.transcripts.read_text().splitlines()[0]
    assert preview["format"] == "transcription" and preview["row_count"] == 96 and len(preview["rows"]) == 2
    assert preview["rows"][0]["text"] == f"[audio: {json.loads(first)['audio']}] {json.loads(first)['text']}"
    assert (preview["bad_audio_rows"], preview["audio_rows_checked"]) == (0, 96)
    # The bad clips training would refuse are counted; the window length only with a model given.
    for kind in ("garbage", "empty", "long"):
        _bad_clip_rows(speech_assets, tmp_path, kind)
    good = str((speech_assets.data_dir / "clips" / "000.wav").resolve())
    data = _jsonl(tmp_path / "rows.jsonl", [{"audio": good, "text": "one"}] + [{"audio": f"clips/{k}.wav", "text": "two"}
                                                                             for k in ("missing", "garbage", "empty", "long")])
    config = typed({"local_datasets": [str(data)], "format": "auto"})
    counted = {model: build_preview(typed(config), 2, model, tmp_path / "cache")["bad_audio_rows"] for model in (None, str(speech_assets.model_dir))}
    assert counted == {None: 3, str(speech_assets.model_dir): 4}
