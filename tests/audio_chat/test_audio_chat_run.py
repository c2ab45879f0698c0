"""An audio chat LoRA run through the real worker and orchestrator: the tiny Qwen2-Audio
learns the replies to its spoken-number chats (the loss falls), stop-and-save then resume
continues the step count, the run records modality audio_chat, and the merged export
(`tunelab export`) loads with AutoProcessor + AutoModelForMultimodalLM and gives the trained
model's logits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from run_helpers import export_merged, finished, recorded_orchestrator, stopped_at_step

from tunelab import paths
from tunelab.demos.audio_chat import audio_chat_demo_config
from tunelab.checkpoints import validate_checkpoint
from tunelab.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
STEPS = 14
STOP_AFTER = 4


def test_audio_chat_lora_learns_stops_saves_resumes_and_exports(audio_chat_assets, home):
    with Store(paths.db_path()) as store, recorded_orchestrator(store) as (orchestrator, recorder):
        first = orchestrator.start(audio_chat_demo_config(audio_chat_assets, steps=STEPS, learning_rate=1e-2))
        first_row = stopped_at_step(orchestrator, recorder, first, STOP_AFTER, timeout=240)
        assert first_row["status"] == "stopped", first_row["error_message"]
        stopped_at = first_row["final_step"]
        assert STOP_AFTER <= stopped_at < STEPS
        assert validate_checkpoint(Path(first_row["output_dir"]) / f"checkpoint-{stopped_at}").step == stopped_at
        assert first_row["modality"] == "audio_chat"  # the worker said so once it had the audio rows

        second = orchestrator.resume(first)
        row = finished(orchestrator, second)
        assert row["status"] == "completed", row["error_message"]
        assert row["modality"] == "audio_chat"
        resumed = store.get_metrics(second)
        assert [m["step"] for m in resumed] == list(range(stopped_at + 1, STEPS + 1))
        losses = [m["loss"] for m in store.get_metrics(first) + resumed]
        assert len(losses) == STEPS
        assert sum(losses[-5:]) / 5 < 0.75 * sum(losses[:5]) / 5  # the replies are learnt (5.6 -> 3.5 over the first and last five steps)
        stages = [e["message"] for e in recorder.of_type("status") if e.get("run_id") == first]
        assert any("audio chat model" in message for message in stages)
        output = Path(row["output_dir"])
        assert (output / "adapter_model.safetensors").is_file() and (output / "processor_config.json").is_file()
        adapted = json.loads((output / "adapter_config.json").read_text())["target_modules"]
        assert adapted and not [n for n in adapted if "audio_tower" in n or "projector" in n]
    _export_gives_the_trained_logits(audio_chat_assets, home, second, output)


def _export_gives_the_trained_logits(assets, home: Path, run_id: int, output: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForMultimodalLM, AutoProcessor

    from tunelab.worker.families.speech.collator import decode_clip

    dest = export_merged(home, run_id, "--dtype", "float32")
    processor = AutoProcessor.from_pretrained(dest)
    messages = [{"role": "user", "content": [{"type": "audio"}, {"type": "text", "text": "Which numbers are spoken?"}]}]
    rate = processor.feature_extractor.sampling_rate
    clip = decode_clip({"path": str(assets.data_dir / "clips" / "005.wav"), "bytes": None}, rate)
    batch = processor(text=[processor.apply_chat_template(messages, add_generation_prompt=True)], audio=[clip],
                      sampling_rate=rate, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        merged = AutoModelForMultimodalLM.from_pretrained(dest)(**batch).logits
        trained = PeftModel.from_pretrained(AutoModelForMultimodalLM.from_pretrained(assets.model_dir), output)(**batch).logits
        base = AutoModelForMultimodalLM.from_pretrained(assets.model_dir)(**batch).logits
    assert (merged - trained).abs().max() < 1e-4
    assert (trained - base).abs().max() > 1e-2  # the adapter changed the model, so losing it would show
