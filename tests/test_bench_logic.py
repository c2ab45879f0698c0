"""The bench's own logic that decides a verdict, without running a benchmark: the GPU
peak-FLOP/s lookup (by name, memory and SMs; MIG slices scaled), and how a tunelab run's
device and precision are read from its setup message."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from gpu import match_peak  # noqa: E402
from runs import StepLog, setup_of  # noqa: E402


@pytest.mark.parametrize("name, memory_gib, sms, tflops", [
    ("NVIDIA H200", 140, 132, 989),
    ("NVIDIA H200 NVL", 140, 132, 835),
    ("NVIDIA H100 80GB HBM3", 79.6, 132, 989),
    ("NVIDIA H100 NVL", 93.6, 132, 835),
    ("NVIDIA H100 PCIe", 79.6, 114, 756),
    ("NVIDIA A100-SXM4-80GB", 79.3, 108, 312),
])
def test_full_chips_are_matched_by_name_and_memory(name, memory_gib, sms, tflops):
    peak, note = match_peak(name, memory_gib, sms)
    assert peak == pytest.approx(tflops * 1e12)
    assert name in note


def test_a_mig_slice_gets_its_share_of_the_chip():
    # An H100 SXM cut to 1g.10gb: 16 of 132 SMs, and the slice's memory, not the chip's.
    peak, note = match_peak("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 9.5, 16)
    assert peak == pytest.approx(989e12 * 16 / 132)
    assert "16/132 SMs" in note


def test_an_unknown_gpu_or_memory_gives_no_peak():
    assert match_peak("NVIDIA Quadro K600", 1, 1)[0] is None
    assert match_peak("NVIDIA H100 80GB HBM3", 40, 132)[0] is None  # no H100 has 40 GB: not guessed


def test_setup_message_gives_device_and_precision():
    log = StepLog(launched=0.0, facts={"statuses": ["Loading", "Setting up lora on CPU in bf16, default attention"]})
    assert setup_of(log) == ("CPU", "bf16")
    assert setup_of(StepLog(launched=0.0)) == ("?", "?")


def test_a_mig_slice_of_an_nvl_part_keeps_the_nvl_peak():
    peak, _ = match_peak("NVIDIA H100 NVL MIG 1g.12gb", 11, 16)
    assert peak == pytest.approx(835e12 * 16 / 132)
