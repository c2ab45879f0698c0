"""Real training runs of the worker in a spawn child, one per training method (CPU, tiny model)."""

from __future__ import annotations

import json

import pytest
from spawned_worker import demo_config, run_to_end

from tunelab import events as ev
from tunelab.checkpoints import validate_checkpoint

pytestmark = pytest.mark.slow

STAGE_ORDER = ["loading_model", "loading_dataset", "formatting", "configuring", "training", "saving"]


def test_lora_run_learns_reports_and_saves(demo_assets, tmp_path):
    out = tmp_path / "lora"
    config = demo_config(demo_assets, out, max_steps=40, eval_steps=20, eval_holdout=0.1)
    final, worker = run_to_end(config)

    assert final["type"] == ev.COMPLETE, final
    assert final["output_dir"] == str(out)
    assert [e["stage"] for e in worker.events if e["type"] == ev.STATUS] == STAGE_ORDER
    types = [e["type"] for e in worker.events]
    assert types.index(ev.OUTPUT_DIR) < types.index(ev.MODEL_LOAD_STARTED) < types.index(ev.MODEL_LOAD_COMPLETED)
    assert ev.EVAL_CONFIGURED in types

    train = worker.progress()
    assert [p["step"] for p in train] == list(range(1, 41))
    assert all(p["total_steps"] == 40 for p in train)
    assert all(p["learning_rate"] > 0 and p["grad_norm"] is not None and p["peak_memory_gb"] > 0 for p in train)
    tokens = [p["num_tokens"] for p in train]
    assert tokens == sorted(tokens) and tokens[0] > 0
    first, last = sum(p["loss"] for p in train[:3]) / 3, sum(p["loss"] for p in train[-3:]) / 3
    assert last < first - 0.5, (first, last)
    evals = [e for e in worker.events if e["type"] == ev.PROGRESS and e["eval_loss"] is not None]
    assert [e["step"] for e in evals] == [20, 40]

    assert (out / "adapter_model.safetensors").is_file() and (out / "tokenizer_config.json").is_file()
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert set(adapter["target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert validate_checkpoint(out / "checkpoint-40").step == 40


@pytest.mark.parametrize(
    ("name", "data", "overrides", "weights", "adapter_flag"),
    [
        ("dora", "alpaca", {"use_dora": True}, "adapter_model.safetensors", "use_dora"),
        ("rslora", "chatml", {"use_rslora": True, "packing": True, "train_on_completions": True, "report_to": "tensorboard"},
         "adapter_model.safetensors", "use_rslora"),
        ("full", "alpaca", {"training_type": "full", "learning_rate": 1e-4, "eval_steps": 0.5, "eval_holdout": 0.1},
         "model.safetensors", None),
        ("cpt", "text", {"training_type": "continued_pretraining", "learning_rate": 1e-4, "packing": True},
         "model.safetensors", None),
    ],
)
def test_each_method_trains_a_few_steps(demo_assets, tmp_path, name, data, overrides, weights, adapter_flag):
    out = tmp_path / name
    config = demo_config(demo_assets, out, max_steps=3, local_datasets=[str(getattr(demo_assets, data))], **overrides)
    final, worker = run_to_end(config)

    assert final["type"] == ev.COMPLETE, final
    losses = [p["loss"] for p in worker.progress()]
    assert len(losses) == 3 and all(loss > 0 for loss in losses)
    assert (out / weights).is_file()
    assert validate_checkpoint(out / "checkpoint-3").step == 3
    if adapter_flag:
        assert json.loads((out / "adapter_config.json").read_text())[adapter_flag] is True
    else:
        assert not (out / "adapter_config.json").exists()
    evals = [e["step"] for e in worker.events if e["type"] == ev.PROGRESS and e["eval_loss"] is not None]
    # eval_steps 0.5 of 3 steps: every 2 steps, plus the Trainer's evaluation at the end.
    assert evals == ([2, 3] if overrides.get("eval_steps") else [])
    if overrides.get("report_to") == "tensorboard":
        assert list((out / "tensorboard").glob("events.out.tfevents.*"))


def test_bad_data_ends_with_an_error_event(demo_assets, tmp_path):
    bad = tmp_path / "qa.jsonl"
    bad.write_text(json.dumps({"question": "2+2?", "answer": "4"}) + "\n")
    final, worker = run_to_end(demo_config(demo_assets, tmp_path / "out", local_datasets=[str(bad)], hf_token="hf_secret_123"))
    assert final["type"] == ev.ERROR
    assert final["error"].startswith("format: ") and "question" in final["error"] and "answer" in final["error"]
    assert "DataFormatError" in final["stack"]
    assert "hf_secret_123" not in json.dumps(worker.events)
    assert not any(e["type"] == ev.STATUS and e["stage"] == "training" for e in worker.events)


def test_a_batch_larger_than_the_data_ends_with_an_error_naming_both(demo_assets, tmp_path):
    few = tmp_path / "few.jsonl"
    few.write_text("".join(json.dumps({"instruction": f"say {i}", "output": str(i)}) + "\n" for i in range(5)))
    final, worker = run_to_end(demo_config(demo_assets, tmp_path / "out", local_datasets=[str(few)], batch_size=64))
    assert final["type"] == ev.ERROR
    assert final["error"].startswith("batch_size: ") and "64" in final["error"] and "5 training rows" in final["error"]
    assert not any(e["type"] == ev.STATUS and e["stage"] == "training" for e in worker.events)
