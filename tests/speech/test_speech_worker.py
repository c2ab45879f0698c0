"""The real worker in a spawn child on the tiny Whisper: a LoRA run on the spoken clips
skips the bad clips it was told to skip (reported per split before training), trains,
evaluates with word error rate next to eval loss (and reports the run's modality as
speech), and saves what AutoProcessor reloads; without skip_bad_audio a clip that is
missing ends the run before training with an error naming the row, the path and the field."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from spawned_worker import demo_config, run_to_end

from tunelab import events as ev

pytestmark = pytest.mark.slow


def _payload(assets, data, out, **overrides):
    """The worker tests' short-run payload, on the tiny Whisper and `data`."""
    return demo_config(SimpleNamespace(model_dir=assets.model_dir, alpaca=data), out, **{"batch_size": 4, **overrides})


def _with_bad_rows(assets, path, rows: list[dict], bad: dict) -> "Path":
    """`rows` with clip paths made absolute, and the bad row second."""
    fixed = [{**row, "audio": str((assets.data_dir / row["audio"]).resolve())} for row in rows]
    path.write_text("".join(json.dumps(row) + "\n" for row in fixed[:1] + [bad] + fixed[1:]))
    return path


def test_a_lora_run_skips_bad_clips_trains_evaluates_word_error_rate_and_saves_the_processor(speech_assets, tmp_path):
    out = tmp_path / "out"
    rows = [json.loads(line) for line in speech_assets.transcripts.read_text().splitlines()]
    (tmp_path / "silence.wav").write_bytes(b"RIFF, but no audio in it")
    train = _with_bad_rows(speech_assets, tmp_path / "train.jsonl", rows[5:], {"audio": "lost/7.wav", "text": "one"})
    held = _with_bad_rows(speech_assets, tmp_path / "held.jsonl", rows[:5], {"audio": "silence.wav", "text": "two"})
    final, worker = run_to_end(_payload(speech_assets, train, out, max_steps=3, eval_steps=3, skip_bad_audio=True,
                                        local_eval_datasets=[str(held)]))
    assert final["type"] == ev.COMPLETE, final
    stages = [e["message"] for e in worker.events if e["type"] == ev.STATUS]
    assert "Tokenizing 92 transcription rows" in stages  # 91 clips and a missing one
    # Bad clips are skipped, counted and named (row, path, reason) before training, per split.
    assert f"Skipped 1 of 92 training rows whose audio is missing, unreadable, empty or too long (skip_bad_audio): row 1 ({tmp_path / 'lost' / '7.wav'}: missing)" in stages
    assert f"Skipped 1 of 6 eval rows whose audio is missing, unreadable, empty or too long (skip_bad_audio): row 1 ({tmp_path / 'silence.wav'}: unreadable)" in stages
    assert stages.index("Training") > max(i for i, m in enumerate(stages) if m.startswith("Skipped"))
    assert any("lora of a speech-to-text model" in message for message in stages)
    # The transcripts' language, said before training: the demo tokenizer's own (en).
    assert any(m.startswith("Transcripts start <|startoftranscript|><|en|><|transcribe|><|notimestamps|> ") for m in stages)
    assert [p["step"] for p in worker.progress()] == [1, 2, 3]
    assert [e["modality"] for e in worker.events if e["type"] == ev.MODALITY] == ["speech"]
    assert any(e["type"] == ev.EVAL_CONFIGURED and e["eval_rows"] == 5 for e in worker.events)
    # The word error rate arrives beside the eval loss, as one of the step's extra numbers.
    evaluated = next(e for e in worker.events if e["type"] == ev.PROGRESS and e["eval_loss"] is not None)
    assert evaluated["step"] == 3 and 0.0 <= evaluated["extra"]["eval_wer"]
    # The Trainer logged it too, so it is in the checkpoint's history.
    logged = json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())["log_history"]
    evaluation = next(entry for entry in logged if "eval_loss" in entry)
    assert evaluation["step"] == 3 and 0.0 <= evaluation["eval_wer"]
    # Every linear layer of the encoder and the decoder is adapted; the output head is not.
    from safetensors import safe_open

    with safe_open(str(out / "adapter_model.safetensors"), "pt") as saved:
        adapted = {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in saved.keys()}
        assert any(".encoder." in name for name in saved.keys()) and any(".decoder." in name for name in saved.keys())
    assert adapted == {"q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"}
    assert (out / "processor_config.json").is_file() and (out / "tokenizer.json").is_file()


def test_a_missing_clip_ends_the_run_before_training(speech_assets, tmp_path):
    data = tmp_path / "rows.jsonl"
    clip = str((speech_assets.data_dir / "clips" / "001.wav").resolve())
    data.write_text("".join(json.dumps(row) + "\n" for row in [
        {"audio": clip, "text": "one"}, {"audio": "lost/7.wav", "text": "two"}, {"audio": clip, "text": "one"}]))
    final, worker = run_to_end(_payload(speech_assets, data, tmp_path / "out", batch_size=2))
    assert final["type"] == ev.ERROR
    assert final["error"].startswith(f"local_datasets: row 1 of the training data: audio {tmp_path / 'lost' / '7.wav'} (column 'audio') does not exist")
    assert "training" not in [e.get("stage") for e in worker.events if e["type"] == ev.STATUS]
