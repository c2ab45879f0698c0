"""A GRPO run end to end on the demo model, through the orchestrator and the real worker:
a LoRA run with a built-in reward, a user's reward file (imported in the worker) and a KL
penalty (beta > 0, the adapter-off base as reference) streams TRL's reward metrics as
per-step extras, stops and saves, then resumes from its checkpoint continuing the step
count, and saves an adapter without TRL's reference adapter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "orchestrator"))

from orch_helpers import EventRecorder  # noqa: E402

from tunelab import paths  # noqa: E402
from tunelab.checkpoints import validate_checkpoint  # noqa: E402
from tunelab.demos.text import demo_config  # noqa: E402
from tunelab.orchestrator import Orchestrator  # noqa: E402
from tunelab.store import Store  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
STREAMED = ("reward", "reward_std", "rewards/contains/mean", "rewards/has_reference/mean", "kl", "completions/mean_length")
RUN_WAIT_S = 300


def test_grpo_streams_its_rewards_stops_saves_and_resumes(demo_assets, prompt_data, reward_file, home):
    steps = 6
    config = demo_config(demo_assets, steps=steps, objective="grpo", local_datasets=[str(prompt_data)], display_name="grpo",
                         rewards=[{"name": "contains"}, {"name": "python", "path": str(reward_file), "function": "has_reference"}],
                         beta=0.04, num_generations=2, batch_size=4, gradient_accumulation_steps=1, max_completion_length=8)
    with Store(paths.db_path()) as store:
        orchestrator = Orchestrator(store)
        recorder = EventRecorder()
        orchestrator.subscribe(recorder)
        try:
            first = orchestrator.start(config)
            progress = recorder.wait_for(lambda e: e["type"] == "progress" and e["step"] >= 2, timeout=RUN_WAIT_S)
            assert set(STREAMED) <= set(progress["extra"]), progress["extra"]
            assert progress["extra"]["rewards/has_reference/mean"] == 0.25  # the user's function ran on the rows' references
            orchestrator.stop(save=True, expected_run_id=first)
            assert orchestrator.wait_idle(RUN_WAIT_S), "the run did not stop"
            first_row = store.get_run(first)
            assert first_row["status"] == "stopped", first_row["error_message"]
            stopped_at = first_row["final_step"]
            assert 2 <= stopped_at < steps
            assert validate_checkpoint(Path(first_row["output_dir"]) / f"checkpoint-{stopped_at}").step == stopped_at

            second = orchestrator.resume(first)
            assert orchestrator.wait_idle(RUN_WAIT_S), "the resumed run did not finish"
            row = store.get_run(second)
            assert row["status"] == "completed", row["error_message"]
            assert [m["step"] for m in store.get_metrics(second)] == list(range(stopped_at + 1, steps + 1))
            extras = store.get_metric_extras(second)
            assert set(STREAMED) <= set(extras)
            assert extras["reward"]["steps"] == list(range(stopped_at + 1, steps + 1))
            output = Path(row["output_dir"])
            assert (output / "adapter_model.safetensors").is_file() and not (output / "ref").exists()
        finally:
            orchestrator.shutdown()
