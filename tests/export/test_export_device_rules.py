"""Export on a GPU machine, checked on the CPU: the export child sees no GPU (so it never
lands on one a run is using), a merge into an already-quantised base is refused, and the
default merged dtype follows the precision the run trained in (recorded by the worker)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from safetensors import safe_open

from export_helpers import run_cli
from test_export_refusals import recorded_run, refused
from tunelab.run_facts import RUN_FACTS

pytestmark = pytest.mark.slow

# Imported by every Python process that has this folder on its path: it records what
# CUDA_VISIBLE_DEVICES the export child was started with.
SITECUSTOMIZE = """
import os
if os.environ.get("RECORD_CUDA_ENV_TO"):
    with open(os.environ["RECORD_CUDA_ENV_TO"], "a") as f:
        f.write(repr(os.environ.get("CUDA_VISIBLE_DEVICES")) + "\\n")
"""


def _copied_run(home: Path, lora_run, name: str, *, model_name: str, precision: str | None) -> int:
    folder = home / "outputs" / name
    shutil.copytree(lora_run.output_dir, folder, ignore=shutil.ignore_patterns("checkpoint-*", "export-*"))
    if precision is not None:
        (folder / RUN_FACTS).write_text(json.dumps({"precision": precision, "cuda": True}))
    return recorded_run(home, "completed", folder=folder, config={**lora_run.run["config"], "model_name": model_name})


def test_worker_records_its_precision(lora_run):
    assert json.loads((lora_run.output_dir / RUN_FACTS).read_text()) == {"precision": "fp32", "cuda": False, "world_size": 1}


def test_a_bf16_run_exports_bfloat16_by_default_and_the_export_sees_no_gpu(home, lora_run, demo_assets, tmp_path, monkeypatch):
    run_id = _copied_run(home, lora_run, "bf16-run", model_name=str(demo_assets.model_dir), precision="bf16")
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    record = tmp_path / "cuda-env.txt"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("RECORD_CUDA_ENV_TO", str(record))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # what a server on a GPU machine would pass on
    done = run_cli(["export", run_id, "--format", "merged"], home)
    assert done.returncode == 0, done.stdout + done.stderr
    assert record.read_text().splitlines()[-1] == "''"  # the last process started was the export child
    weights = home / "outputs" / "bf16-run" / "export-merged" / "model.safetensors"
    with safe_open(str(weights), "pt") as f:
        assert {str(f.get_tensor(name).dtype) for name in f.keys()} == {"torch.bfloat16"}


def test_merging_into_a_quantised_base_is_refused(home, lora_run, demo_assets, tmp_path):
    quantised = tmp_path / "base-bnb-4bit"
    shutil.copytree(demo_assets.model_dir, quantised)
    config = json.loads((quantised / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}
    (quantised / "config.json").write_text(json.dumps(config))
    run_id = _copied_run(home, lora_run, "on-4bit", model_name=str(quantised), precision=None)
    refused(run_cli(["export", run_id, "--format", "merged"], home), 2, "--format", "bitsandbytes-quantised", "format adapter")
    assert not (home / "outputs" / "on-4bit" / "export-merged").exists()


def test_a_loftq_adapter_is_merged_into_the_weights_it_was_trained_against(home, demo_assets):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from export_helpers import logits_of, peft_logits, prompt_ids
    from tunelab.worker.loftq_base import save_loftq_base

    # What LoftQ without 4-bit leaves behind (PEFT's own LoftQ needs CUDA): the adapted
    # weights replaced by a coarsely quantised copy, and a trained adapter on top.
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(demo_assets.model_dir, dtype=torch.float32)
    trained = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    for name, module in trained.named_modules():
        if hasattr(module, "lora_A"):
            layer = module.get_base_layer()
            layer.weight.data = torch.round(layer.weight.data * 8) / 8
            torch.nn.init.normal_(module.lora_B["default"].weight, std=0.05)
    folder = home / "outputs" / "loftq-run"
    trained.save_pretrained(folder)
    AutoTokenizer.from_pretrained(demo_assets.model_dir).save_pretrained(folder)
    save_loftq_base(trained, folder)
    run_id = recorded_run(home, "completed", folder=folder, config={"model_name": str(demo_assets.model_dir),
                                                                   "training_type": "lora", "use_loftq": True})
    ids = prompt_ids(demo_assets.model_dir)
    expected = logits_of(trained, ids)
    # Merged into the original weights, the adapter would be off by the quantisation error.
    assert not torch.allclose(peft_logits(demo_assets, folder, ids), expected, atol=1e-3)

    done = run_cli(["export", run_id, "--format", "merged", "--dtype", "float32"], home)
    assert done.returncode == 0, done.stdout + done.stderr
    merged = AutoModelForCausalLM.from_pretrained(folder / "export-merged", dtype=torch.float32)
    assert torch.allclose(logits_of(merged, ids), expected, atol=1e-4)
