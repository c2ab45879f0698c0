"""The automatic CPU precision (`model_setup.settle_cpu_precision`): bf16 autocast only
where the CPU multiplies bf16 in hardware and the model is wide enough to gain from it;
an explicit `precision`, and CUDA's own choice, are left alone."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from typed_config import typed
from tunelab.worker.model_setup import BF16_MIN_HIDDEN, DeviceSettings, native_cpu_bf16, settle_cpu_precision  # noqa: E402

CPU = DeviceSettings(cuda=False, precision="fp32", gradient_checkpointing=False)


def _llama(hidden: int) -> LlamaForCausalLM:
    with torch.device("meta"):  # only the shape matters
        return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=hidden, intermediate_size=2 * hidden,
                                            num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4))


def test_wide_models_get_bf16_autocast_only_on_a_cpu_with_native_bf16():
    settled = settle_cpu_precision(typed({"precision": "auto"}), CPU, _llama(BF16_MIN_HIDDEN))
    assert settled.precision == ("bf16" if native_cpu_bf16() else "fp32")
    assert settled.gradient_checkpointing is False and settled.cuda is False


def test_narrow_models_stay_in_fp32():
    assert settle_cpu_precision(typed({}), CPU, _llama(BF16_MIN_HIDDEN // 2)).precision == "fp32"


def test_an_explicit_precision_and_cuda_are_left_alone():
    assert settle_cpu_precision(typed({"precision": "fp32"}), CPU, _llama(1024)) is CPU
    gpu = DeviceSettings(cuda=True, precision="fp16", gradient_checkpointing=True)
    assert settle_cpu_precision(typed({}), gpu, _llama(1024)) is gpu
