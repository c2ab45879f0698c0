"""Choices the worker makes for CUDA that can be checked without a GPU: the automatic
precision by compute capability."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tunelab.worker.model_setup import cuda_precision  # noqa: E402


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
