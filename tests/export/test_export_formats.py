"""`tunelab export` of real trained runs: the adapter, merged weights in each dtype, and a
stopped run's checkpoint, each checked by loading the export and comparing its logits."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from export_helpers import base_model, logits_of, peft_logits, prompt_ids, run_cli
from tunelab.store import Store

pytestmark = pytest.mark.slow


def test_adapter_export_gives_the_trained_adapters_logits(lora_run, demo_assets):
    result = run_cli(["export", lora_run.run_id], lora_run.home)
    assert result.returncode == 0, result.stdout + result.stderr
    dest = lora_run.output_dir / "export-adapter"
    assert str(dest) in result.stdout.replace("\n", "")
    names = {p.name for p in dest.iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", "tokenizer.json", "tokenizer_config.json",
            "tunelab-export.json"} <= names
    assert not [p for p in dest.parent.iterdir() if "partial" in p.name]
    manifest = json.loads((dest / "tunelab-export.json").read_text())
    assert manifest["run_id"] == lora_run.run_id and manifest["format"] == "adapter" and manifest["step"] is None
    # adapter_config.json names the base model, so the folder alone is enough for PEFT.
    assert Path(json.loads((dest / "adapter_config.json").read_text())["base_model_name_or_path"]) == demo_assets.model_dir

    ids = prompt_ids(dest)  # the tokenizer travelled with the adapter
    exported = peft_logits(demo_assets, dest, ids)
    trained = peft_logits(demo_assets, lora_run.output_dir, ids)
    assert torch.equal(exported, trained)
    # The adapter really changes the model, so an export that lost it would show.
    assert (exported - logits_of(base_model(demo_assets), ids)).abs().max() > 1e-2


def test_adapter_export_replaces_an_earlier_export_in_the_same_folder(lora_run):
    for _ in range(2):
        result = run_cli(["export", lora_run.run_id, "--dest", "again/adapter"], lora_run.home)
        assert result.returncode == 0, result.stderr
    dest = lora_run.outputs_root / "again" / "adapter"
    assert (dest / "adapter_model.safetensors").is_file()
    assert sorted(p.name for p in dest.parent.iterdir()) == ["adapter"]


@pytest.mark.parametrize(("dtype", "torch_dtype", "tolerance"), [
    (None, torch.float16, 5e-3),            # the default: 16-bit weights
    ("float32", torch.float32, 1e-4),
])
def test_merged_export_matches_base_plus_adapter(lora_run, demo_assets, dtype, torch_dtype, tolerance):
    dest = lora_run.outputs_root / f"merged-{dtype or 'default'}"
    args = ["export", lora_run.run_id, "--format", "merged", "--dest", dest] + (["--dtype", dtype] if dtype else [])
    result = run_cli(args, lora_run.home)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (dest / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(dest)
    assert {p.dtype for p in merged.parameters()} == {torch_dtype}
    assert merged.config.use_cache is True

    ids = prompt_ids(dest)
    expected = peft_logits(demo_assets, lora_run.output_dir, ids)
    got = logits_of(merged, ids)
    assert (got - expected).abs().max() < tolerance
    assert (got - logits_of(base_model(demo_assets), ids)).abs().max() > 10 * tolerance


def test_merged_bfloat16_of_a_full_run_is_its_weights_in_bfloat16(full_run):
    dest = full_run.outputs_root / "full-bf16"
    result = run_cli(["export", full_run.run_id, "--format", "merged", "--dtype", "bfloat16", "--dest", dest], full_run.home)
    assert result.returncode == 0, result.stdout + result.stderr
    trained = load_file(full_run.output_dir / "model.safetensors")
    exported = load_file(dest / "model.safetensors")
    assert set(exported) == set(trained)
    for name, weight in trained.items():
        assert exported[name].dtype == torch.bfloat16
        assert torch.equal(exported[name], weight.to(torch.bfloat16)), name
    AutoTokenizer.from_pretrained(dest)


def test_stopped_run_exports_the_checkpoint_it_saved(lora_run, demo_assets, tmp_path):
    """A run stopped with save at step 5: its record and folder as the orchestrator leaves
    them (status stopped, final step 5, a valid checkpoint-5), built from a real checkpoint."""
    store = Store(lora_run.home / "tunelab.db")
    folder = lora_run.outputs_root / "stopped-run"
    shutil.copytree(lora_run.output_dir / "checkpoint-5", folder / "checkpoint-5")
    run_id = store.create_run(lora_run.run["config"], lora_run.run["model_name"], "alpaca.jsonl")
    store.finalize_run(run_id, status="stopped", ended_at=time.time(), total_steps=40, final_step=5, final_loss=5.0,
                       duration_seconds=3.0, output_dir=str(folder), error_message=None, loss_sparkline=[5.0],
                       resume_blocked=False)
    store.close()

    result = run_cli(["export", run_id], lora_run.home)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "checkpoint of step 5" in result.stdout
    dest = folder / "export-adapter"
    manifest = json.loads((dest / "tunelab-export.json").read_text())
    assert manifest["step"] == 5 and manifest["source"] == str(folder / "checkpoint-5")
    assert not (dest / "optimizer.pt").exists()  # only what inference needs
    ids = prompt_ids(dest)
    assert torch.equal(peft_logits(demo_assets, dest, ids), peft_logits(demo_assets, folder / "checkpoint-5", ids))

