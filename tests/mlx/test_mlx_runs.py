"""End-to-end runs of the MLX backend: the real worker entry in a real spawned process,
on the demo's tiny Llama. LoRA completes with a falling loss; DoRA and full fine-tuning
train; stop-and-save writes a checkpoint the shared validator accepts and resume carries
on with the same losses an uninterrupted run has; cancel saves nothing."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mlx.core", reason="MLX is not installed (pip install -e '.[mlx]')")

from tunelab import events  # noqa: E402
from tunelab.checkpoints import latest_valid_checkpoint, validate_checkpoint  # noqa: E402
from worker_runs import WorkerRun, checkpoints_in, mlx_config, stop_at  # noqa: E402

pytestmark = [pytest.mark.mlx, pytest.mark.slow]

# The reference LoRA run: long enough that a stop at step 3 lands well before the end.
LORA = {"max_steps": 30, "eval_steps": 10, "eval_holdout": 0.1, "lora_dropout": 0.1,
        "gradient_accumulation_steps": 2, "warmup_steps": 3}


@pytest.fixture(scope="module")
def lora_run(demo_assets, tmp_path_factory):
    out = tmp_path_factory.mktemp("lora") / "run"
    return WorkerRun(mlx_config(demo_assets, out, **LORA)).run(), out


def test_lora_run_completes_with_falling_loss_and_full_progress(lora_run):
    run, out = lora_run
    assert run.final["type"] == events.COMPLETE, run.final
    assert run.final["output_dir"] == str(out) and "completed 30 steps" in run.final["status_message"]
    assert run.stages() == ["loading_model", "loading_dataset", "formatting", "configuring", "training", "saving"]
    assert run.process.exitcode == 0

    progress = run.progress
    assert [e["step"] for e in progress] == list(range(1, 31))
    for event in progress:
        assert event["total_steps"] == 30
        for field in ("loss", "learning_rate", "grad_norm", "epoch", "num_tokens", "elapsed_seconds", "peak_memory_gb"):
            assert event[field] is not None, (field, event)
    assert progress[0]["learning_rate"] == 0.0  # linear warmup starts at zero, as in HF
    assert [e["num_tokens"] for e in progress] == sorted(e["num_tokens"] for e in progress)
    assert progress[-1]["eta_seconds"] == 0.0
    losses = [e["loss"] for e in progress]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3
    evals = {e["step"]: e["eval_loss"] for e in progress if e["eval_loss"] is not None}
    assert sorted(evals) == [10, 20, 30] and evals[30] < evals[10]
    assert any(e["type"] == events.EVAL_CONFIGURED for e in run.events)


def test_lora_run_saves_adapter_and_a_valid_final_checkpoint(lora_run):
    _, out = lora_run
    for name in ("adapters.safetensors", "adapter_config.json", "tokenizer.json"):
        assert (out / name).is_file(), name
    info = validate_checkpoint(out / "checkpoint-30")
    assert info.kind == "mlx" and info.step == 30
    assert checkpoints_in(out) == ["checkpoint-30"]

    from mlx_lm import generate, load

    base = json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"]
    model, tokenizer = load(base, adapter_path=str(out))
    assert isinstance(generate(model, tokenizer, "What is the capital of Peru?", max_tokens=4), str)


def test_stop_and_save_then_resume_continues_with_the_same_losses(lora_run, demo_assets, tmp_path):
    reference, _ = lora_run
    first_out = tmp_path / "first"
    first = WorkerRun(mlx_config(demo_assets, first_out, **LORA)).run(stop_at(3, save=True))
    assert first.final["type"] == events.COMPLETE, first.final
    stopped = first.progress[-1]["step"]
    assert 3 <= stopped < 30
    assert first.final["status_message"] == f"stopped at step {stopped}; checkpoint saved"
    assert checkpoints_in(first_out) == [f"checkpoint-{stopped}"]
    assert not (first_out / "adapters.safetensors").exists()  # no final adapter for a stopped run
    checkpoint = latest_valid_checkpoint(first_out)
    assert checkpoint == first_out / f"checkpoint-{stopped}"
    assert json.loads((checkpoint / "scheduler.json").read_text())["step"] == stopped

    second_out = tmp_path / "second"
    second = WorkerRun(mlx_config(demo_assets, second_out, resume_from=checkpoint, **LORA)).run()
    assert second.final["type"] == events.COMPLETE, second.final
    assert [e["step"] for e in second.progress] == list(range(stopped + 1, 31))
    expected = reference.losses()
    for step, loss in second.losses().items():
        assert loss == pytest.approx(expected[step], abs=1e-4), step
    assert second.progress[-1]["num_tokens"] == reference.progress[-1]["num_tokens"]
    assert validate_checkpoint(second_out / "checkpoint-30").step == 30


def test_cancel_stops_without_saving_anything(demo_assets, tmp_path):
    out = tmp_path / "cancelled"
    run = WorkerRun(mlx_config(demo_assets, out, max_steps=500)).run(stop_at(2, save=False))
    assert run.final["type"] == events.COMPLETE and run.final["output_dir"] is None
    assert run.final["status_message"] == "cancelled"
    assert run.progress[-1]["step"] < 500
    assert checkpoints_in(out) == [] and not (out / "adapters.safetensors").exists()
    assert run.process.exitcode == 0


def test_dora_trains_and_saves_magnitude_vectors(demo_assets, tmp_path):
    import mlx.core as mx

    out = tmp_path / "dora"
    run = WorkerRun(mlx_config(demo_assets, out, max_steps=3, use_dora=True)).run()
    assert run.final["type"] == events.COMPLETE, run.final
    assert len(run.losses()) == 3
    adapter = mx.load(str(out / "adapters.safetensors"))
    assert any(name.endswith(".m") for name in adapter) and any(name.endswith(".lora_a") for name in adapter)
    assert json.loads((out / "adapter_config.json").read_text())["fine_tune_type"] == "dora"


def test_full_fine_tuning_checkpoints_every_save_steps_and_resumes_exactly(demo_assets, tmp_path):
    settings = {"training_type": "full", "max_steps": 4, "save_steps": 2, "learning_rate": 3e-4}
    out = tmp_path / "full"
    run = WorkerRun(mlx_config(demo_assets, out, **settings)).run()
    assert run.final["type"] == events.COMPLETE, run.final
    assert checkpoints_in(out) == ["checkpoint-2", "checkpoint-4"]
    assert validate_checkpoint(out / "checkpoint-2").kind == "full"
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    assert not (out / "adapter_config.json").exists()  # a full model folder, not an adapter

    resumed = WorkerRun(mlx_config(demo_assets, tmp_path / "again", resume_from=out / "checkpoint-2", **settings)).run()
    assert resumed.final["type"] == events.COMPLETE, resumed.final
    assert sorted(resumed.losses()) == [3, 4]
    for step, loss in resumed.losses().items():
        assert loss == pytest.approx(run.losses()[step], abs=1e-4)


def test_resume_with_a_different_adapter_shape_is_an_error_naming_resume_from(lora_run, demo_assets, tmp_path):
    _, out = lora_run
    run = WorkerRun(mlx_config(demo_assets, tmp_path / "bad", resume_from=out / "checkpoint-30", **{**LORA, "lora_r": 8})).run()
    assert run.final["type"] == events.ERROR
    assert run.final["error"].startswith("resume_from:") and "lora_r" in run.final["error"]
