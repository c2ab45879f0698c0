"""Choices the worker makes for CUDA that can be checked without a GPU: the automatic
precision by compute capability, where QLoRA + LoftQ reads the original weights, and the
attention of packed runs."""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")

from typed_config import typed
from tunelab.worker.model_setup import (  # noqa: E402
    DeviceSettings,
    SetupError,
    attention_for,
    cuda_packed_attention,
    cuda_precision,
    loftq_weights_path,
)


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
    loader = _SafetensorLoader(model, loftq_weights_path(typed(config)))
    original = loader.get_tensor("model.layers.0.self_attn.q_proj.weight")
    assert torch.equal(original, model.get_base_model().model.layers[0].self_attn.q_proj.weight.detach())

    assert loftq_weights_path(typed({"model_name": "org/hub-model"})) is None
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SetupError, match="use_loftq.*safetensors"):
        loftq_weights_path(typed({"model_name": str(tmp_path)}))


@pytest.mark.parametrize("capability, flash_installed, expected", [
    ((9, 0), True, "flash_attention_2"),
    ((8, 0), True, "flash_attention_2"),
    ((7, 5), True, "flex_attention"),  # FlashAttention-2 needs Ampere
    ((9, 0), False, "flex_attention"),
])
def test_packed_cuda_runs_get_a_varlen_attention(capability, flash_installed, expected):
    assert cuda_packed_attention(capability, flash_installed) == expected


def test_attention_follows_packing_device_and_installed_flash_attn(tmp_path, monkeypatch):
    h100 = DeviceSettings(cuda=True, precision="bf16", gradient_checkpointing=True, capability=(9, 0))
    assert attention_for(typed({"packing": False}), h100) == {}
    if importlib.util.find_spec("flash_attn") is None:  # as here: flash-attn builds only with CUDA
        assert attention_for(typed({"packing": True}), h100) == {"attn_implementation": "flex_attention"}
    (tmp_path / "flash_attn").mkdir()
    (tmp_path / "flash_attn" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert attention_for(typed({"packing": True}), h100) == {"attn_implementation": "flash_attention_2"}
    cpu = DeviceSettings(cuda=False, precision="fp32", gradient_checkpointing=False)
    assert attention_for(typed({"packing": True}), cpu)["attn_implementation"] not in ("flash_attention_2", "flex_attention")
