"""A speech-to-text LoRA run through the real worker and orchestrator: stop-and-save then
resume continues the step count, and the merged export (`tunelab export`) loads with
AutoProcessor + AutoModelForSpeechSeq2Seq (and as an automatic-speech-recognition
pipeline), gives the trained model's logits and carries the run's transcript language in
its generation_config."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from run_helpers import export_merged, finished, recorded_orchestrator, stopped_at_step

from tunelab import paths
from tunelab.checkpoints import validate_checkpoint
from tunelab.demos.speech import speech_demo_config
from tunelab.store import Store

pytestmark = pytest.mark.slow
STEPS = 8


def test_speech_lora_stops_saves_resumes_and_exports(speech_assets, home):
    with Store(paths.db_path()) as store, recorded_orchestrator(store) as (orchestrator, recorder):
        config = speech_demo_config(speech_assets, steps=STEPS, training_type="lora", learning_rate=3e-3,
                                    batch_size=4, eval_steps=0)
        first = orchestrator.start(config)
        first_row = stopped_at_step(orchestrator, recorder, first, 3, timeout=240)
        assert first_row["status"] == "stopped", first_row["error_message"]
        assert first_row["modality"] == "speech"
        stopped_at = first_row["final_step"]
        assert 3 <= stopped_at < STEPS
        assert validate_checkpoint(Path(first_row["output_dir"]) / f"checkpoint-{stopped_at}").step == stopped_at

        second = orchestrator.resume(first)
        row = finished(orchestrator, second)
        assert row["status"] == "completed", row["error_message"]
        resumed = store.get_metrics(second)
        assert [m["step"] for m in resumed] == list(range(stopped_at + 1, STEPS + 1))
        stages = [e["message"] for e in recorder.of_type("status") if e.get("run_id") == first]
        assert any("speech-to-text model" in message for message in stages)
        output = Path(row["output_dir"])
        assert (output / "adapter_model.safetensors").is_file() and (output / "processor_config.json").is_file()
    _export_gives_the_trained_logits(speech_assets, home, second, output)


def _export_gives_the_trained_logits(assets, home: Path, run_id: int, output: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForSpeechSeq2Seq, AutoProcessor, pipeline

    from tunelab.worker.families.speech.collator import decode_clip

    dest = export_merged(home, run_id, "--dtype", "float32")
    processor = AutoProcessor.from_pretrained(dest)
    clip = decode_clip({"path": str(assets.data_dir / "clips" / "005.wav"), "bytes": None}, 16000)
    features = processor.feature_extractor([clip], sampling_rate=16000, return_tensors="pt").input_features
    labels = torch.tensor([processor.tokenizer("one two").input_ids[1:]])
    with torch.no_grad():
        merged = AutoModelForSpeechSeq2Seq.from_pretrained(dest)(input_features=features, labels=labels).logits
        base = AutoModelForSpeechSeq2Seq.from_pretrained(assets.model_dir)
        trained = PeftModel.from_pretrained(base, output)(input_features=features, labels=labels).logits
        untrained = AutoModelForSpeechSeq2Seq.from_pretrained(assets.model_dir)(input_features=features, labels=labels).logits
    assert (merged - trained).abs().max() < 1e-4
    assert (trained - untrained).abs().max() > 1e-2  # the adapter changed the model, so losing it would show
    # The export transcribes with the prefix the run's labels had (speech_prefix), not the base's detection.
    from transformers import GenerationConfig

    saved = GenerationConfig.from_pretrained(dest)
    assert (saved.language, saved.task) == ("en", "transcribe")
    assert processor.tokenizer("one").input_ids[:2] == processor.tokenizer.convert_tokens_to_ids(["<|startoftranscript|>", "<|en|>"])
    # What people load a speech-to-text export with.
    transcribe = pipeline("automatic-speech-recognition", model=str(dest), device="cpu")
    assert isinstance(transcribe({"raw": clip, "sampling_rate": 16000}, generate_kwargs={"max_new_tokens": 8})["text"], str)
