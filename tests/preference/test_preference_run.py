"""Preference runs end to end on the demo model: a DPO LoRA run through the real worker
streams TRL's reward metrics as progress extras and saves an adapter that reloads (without
TRL's reference adapter); through the orchestrator a DPO run stops and saves, then resumes
from its checkpoint continuing the step count, with the rewards stored per step; LLaMA-Factory's
DPO and KTO files, as shipped, train with format auto."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "orchestrator"))

from orch_helpers import EventRecorder  # noqa: E402
from public_shapes import demo_llamafactory_dpo, demo_llamafactory_kto, write_json_array  # noqa: E402
from spawned_worker import demo_config, run_to_end  # noqa: E402

from tunelab import events as ev  # noqa: E402
from tunelab import paths  # noqa: E402
from tunelab.checkpoints import validate_checkpoint  # noqa: E402
from tunelab.demos.text import demo_config as orchestrator_demo_config  # noqa: E402
from tunelab.orchestrator import Orchestrator  # noqa: E402
from tunelab.store import Store  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
REWARDS = ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies")
RUN_WAIT_S = 300


def test_dpo_lora_streams_rewards_and_saves_an_adapter_that_reloads(demo_assets, preference_data, tmp_path):
    output = tmp_path / "dpo"
    final, worker = run_to_end(demo_config(demo_assets, output, local_datasets=[str(preference_data)], objective="dpo",
                                           max_steps=4, learning_rate=5e-3))
    assert final["type"] == ev.COMPLETE, final
    progress = [e for e in worker.events if e["type"] == ev.PROGRESS]
    assert [e["step"] for e in progress] == [1, 2, 3, 4]
    assert all(set(REWARDS) <= set(e["extra"]) for e in progress), progress[0]
    assert progress[0]["extra"]["rewards/margins"] == 0.0  # the policy starts as its reference
    assert any(e["extra"]["rewards/margins"] != 0.0 for e in progress[1:])

    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert not (output / "ref").exists()  # TRL's reference adapter is not part of the result
    tokenizer = AutoTokenizer.from_pretrained(output)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "Name the colour you were given.\nThe colour is red."}],
                                        add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        base = AutoModelForCausalLM.from_pretrained(demo_assets.model_dir)(ids).logits
        trained = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(demo_assets.model_dir), output)(ids).logits
    assert (trained - base).abs().max() > 1e-3  # the adapter learned something and reloaded with it


def test_dpo_run_stops_saves_and_resumes_with_its_rewards_stored(demo_assets, preference_data, home):
    steps = 10
    config = orchestrator_demo_config(demo_assets, steps=steps, objective="dpo", local_datasets=[str(preference_data)],
                                      display_name="dpo demo")
    with Store(paths.db_path()) as store:
        orchestrator = Orchestrator(store)
        recorder = EventRecorder()
        orchestrator.subscribe(recorder)
        try:
            first = orchestrator.start(config)
            recorder.wait_for(lambda e: e["type"] == "progress" and e["step"] >= 3, timeout=240)
            orchestrator.stop(save=True, expected_run_id=first)
            assert orchestrator.wait_idle(RUN_WAIT_S), "the run did not stop"
            first_row = store.get_run(first)
            assert first_row["status"] == "stopped", first_row["error_message"]
            stopped_at = first_row["final_step"]
            assert 3 <= stopped_at < steps
            assert validate_checkpoint(Path(first_row["output_dir"]) / f"checkpoint-{stopped_at}").step == stopped_at

            second = orchestrator.resume(first)
            assert orchestrator.wait_idle(RUN_WAIT_S), "the resumed run did not finish"
            row = store.get_run(second)
            assert row["status"] == "completed", row["error_message"]
            assert [m["step"] for m in store.get_metrics(second)] == list(range(stopped_at + 1, steps + 1))
            margins = store.get_metric_extras(second)["rewards/margins"]
            assert margins["steps"] == list(range(stopped_at + 1, steps + 1))
            assert set(REWARDS) <= set(store.get_metric_extras(first))
            assert (Path(row["output_dir"]) / "adapter_model.safetensors").is_file()
        finally:
            orchestrator.shutdown()


def test_kto_trains_on_unpaired_rows_and_streams_its_rewards(demo_assets, unpaired_data, tmp_path):
    output = tmp_path / "kto"
    final, worker = run_to_end(demo_config(demo_assets, output, local_datasets=[str(unpaired_data)], objective="kto",
                                           max_steps=2, learning_rate=5e-3))
    assert final["type"] == ev.COMPLETE, final
    progress = [e for e in worker.events if e["type"] == ev.PROGRESS]
    assert [e["step"] for e in progress] == [1, 2]
    assert all({"rewards/chosen", "rewards/rejected", "rewards/margins"} <= set(e["extra"]) for e in progress), progress[0]
    assert (output / "adapter_model.safetensors").is_file() and not (output / "ref").exists()


@pytest.mark.parametrize(("objective", "rows"), [("dpo", demo_llamafactory_dpo), ("kto", demo_llamafactory_kto)])
def test_llamafactory_files_as_shipped_train_with_format_auto(objective, rows, demo_assets, tmp_path):
    data = write_json_array(tmp_path / f"{objective}_en_demo.json", rows())
    final, worker = run_to_end(demo_config(demo_assets, tmp_path / objective, local_datasets=[str(data)], objective=objective,
                                           format="auto", max_steps=2, learning_rate=5e-3))
    assert final["type"] == ev.COMPLETE, final
    progress = [e for e in worker.events if e["type"] == ev.PROGRESS]
    assert [e["step"] for e in progress] == [1, 2]
    assert "rewards/margins" in progress[0]["extra"]
