"""Choices the worker makes for CUDA that can be checked without a GPU: the automatic
precision by compute capability, and where QLoRA + LoftQ reads the original weights."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tunelab.worker.model_setup import SetupError, cuda_precision, loftq_weights_path  # noqa: E402


@pytest.mark.parametrize("capability, expected", [
    ((6, 0), "fp16"),  # P100
    ((7, 0), "fp16"),  # V100: bf16 only through emulation
    ((7, 5), "fp16"),  # T4
    ((8, 0), "bf16"),  # A100
    ((8, 9), "bf16"),  # L4 / L40S
    ((9, 0), "bf16"),  # H100 / H200
    ((12, 0), "bf16"),
])
def test_automatic_cuda_precision_follows_compute_capability(capability, expected):
    assert cuda_precision(capability) == expected


def test_loftq_on_a_local_folder_names_the_folder_peft_reads_the_weights_from(demo_assets, tmp_path):
    from peft import LoraConfig, get_peft_model
    from peft.utils.loftq_utils import _SafetensorLoader
    from transformers import AutoModelForCausalLM

    config = {"model_name": str(demo_assets.model_dir), "use_loftq": True, "load_in_4bit": True}
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(demo_assets.model_dir), LoraConfig(target_modules=["q_proj"]))
    # What replace_lora_weights_loftq does first: without model_path PEFT refuses a local model.
    with pytest.raises(ValueError, match="model_path"):
        _SafetensorLoader(model, None)
    loader = _SafetensorLoader(model, loftq_weights_path(config))
    original = loader.get_tensor("model.layers.0.self_attn.q_proj.weight")
    assert torch.equal(original, model.get_base_model().model.layers[0].self_attn.q_proj.weight.detach())

    assert loftq_weights_path({"model_name": "org/hub-model"}) is None
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SetupError, match="use_loftq.*safetensors"):
        loftq_weights_path({"model_name": str(tmp_path)})
