"""A vision-language LoRA run through the real worker and orchestrator: the tiny LLaVA
learns captions from pixels (and evaluates on held-out image rows), stop-and-save then
resume continues the step count, and the
merged export (`tunelab export`) loads with AutoProcessor + AutoModelForImageTextToText
and gives the trained model's logits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from run_helpers import export_merged, finished, recorded_orchestrator, stopped_at_step

from tunelab import paths
from tunelab.checkpoints import validate_checkpoint
from tunelab.store import Store
from tunelab.demos.vision import vision_demo_config

# Two runs, an export and three model loads: on a loaded 2-core machine this nears the default 300 s.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
STEPS = 60


def test_vision_lora_learns_stops_saves_and_resumes(vision_assets, home):
    with Store(paths.db_path()) as store, recorded_orchestrator(store) as (orchestrator, recorder):
        first = orchestrator.start(vision_demo_config(vision_assets, steps=STEPS, eval_steps=20, eval_holdout=0.1))
        first_row = stopped_at_step(orchestrator, recorder, first, 20, timeout=240)  # 60 steps take ~10 s on two idle cores
        assert first_row["status"] == "stopped", first_row["error_message"]
        stopped_at = first_row["final_step"]
        assert 20 <= stopped_at < STEPS
        assert validate_checkpoint(Path(first_row["output_dir"]) / f"checkpoint-{stopped_at}").step == stopped_at
        assert first_row["modality"] == "vision"  # the worker said so once it had the image rows

        second = orchestrator.resume(first)
        row = finished(orchestrator, second)
        assert row["status"] == "completed", row["error_message"]
        assert row["modality"] == "vision" and orchestrator.snapshot()["modality"] == "vision"
        resumed = store.get_metrics(second)
        assert [m["step"] for m in resumed] == list(range(stopped_at + 1, STEPS + 1))
        metrics = store.get_metrics(first) + resumed
        assert [m["step"] for m in metrics if m["eval_loss"] is not None] == [20, 40, 60]  # image rows evaluate too
        losses = [m["loss"] for m in metrics]
        assert len(losses) == STEPS
        # The captions name a colour and a shape only the pixels tell: the loss on them falls.
        assert sum(losses[-5:]) / 5 < 0.75 * sum(losses[:5]) / 5
        stages = [e["message"] for e in recorder.of_type("status") if e.get("run_id") == first]
        assert any("vision-language model" in message for message in stages)
        output = Path(row["output_dir"])
        assert (output / "adapter_model.safetensors").is_file() and (output / "processor_config.json").is_file()
    _export_gives_the_trained_logits(vision_assets, home, second, output)


def _export_gives_the_trained_logits(assets, home: Path, run_id: int, output: Path) -> None:
    from peft import PeftModel
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    dest = export_merged(home, run_id, "--dtype", "float32")
    processor = AutoProcessor.from_pretrained(dest)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe the image."}]}]
    image = Image.open(assets.data_dir / "images" / "005.png").convert("RGB")
    batch = processor(text=[processor.apply_chat_template(messages, add_generation_prompt=True)], images=[[image]],
                      return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        merged = AutoModelForImageTextToText.from_pretrained(dest)(**batch).logits
        trained = PeftModel.from_pretrained(AutoModelForImageTextToText.from_pretrained(assets.model_dir), output)(**batch).logits
        base = AutoModelForImageTextToText.from_pretrained(assets.model_dir)(**batch).logits
    assert (merged - trained).abs().max() < 1e-4
    assert (trained - base).abs().max() > 1e-2  # the adapter changed the model, so losing it would show
