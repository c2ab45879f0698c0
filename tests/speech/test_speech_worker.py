"""The real worker in a spawn child on the tiny Whisper: a LoRA run on the tone clips
trains, evaluates with word error rate next to eval loss (and reports the run's modality
as speech), and saves what AutoProcessor
reloads; a clip that is missing ends the run before training with an error naming the
row, the path and the field."""

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


def test_a_lora_run_trains_evaluates_word_error_rate_and_saves_the_processor(speech_assets, tmp_path):
    out = tmp_path / "out"
    final, worker = run_to_end(_payload(speech_assets, speech_assets.transcripts, out, max_steps=3,
                                        eval_steps=3, eval_holdout=0.05))
    assert final["type"] == ev.COMPLETE, final
    stages = [e["message"] for e in worker.events if e["type"] == ev.STATUS]
    assert "Tokenizing 91 transcription rows" in stages  # 96 clips, 5 held out
    assert any("lora of a speech-to-text model" in message for message in stages)
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
