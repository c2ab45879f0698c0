"""bench/gpu_check.py, the one command that proves the CUDA path on a GPU:
- `--dry-run`: the check's own code on the CPU with the demo model (real orchestrator,
  worker, stop-and-save, resume and export) passes and says which items need CUDA;
- its CUDA branch, run on the CPU with a stand-in device (a stand-in H100's facts where
  the child that probes CUDA and builds the model would answer) up to the first training
  run, where a real GPU is needed: the setup, the peak FLOP/s lookup, N, and the
  tokens/s and MFU figures of a run's progress events. Each stand-in takes exactly the
  arguments the real function takes, so a call the real one would refuse fails here."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "gpu_check.py"
if str(SCRIPT.parent) not in sys.path:
    sys.path.insert(0, str(SCRIPT.parent))

import assets  # noqa: E402
import gpu  # noqa: E402
import gpu_check  # noqa: E402

# What bench/gpu.py's build child reports on an H100 SXM, and the model N it built.
STAND_IN_H100 = {"n": 494_000_000, "name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.6, "sms": 132, "capability": [9, 0]}
TOKENS_PER_STEP, SECONDS_PER_STEP = 8192, 0.5


@pytest.mark.slow
def test_dry_run_passes_and_skips_what_needs_cuda(tmp_path, demo_assets):
    report = tmp_path / "check.json"
    # The session's demo assets (built by the same ensure_demo_assets), copied to where the
    # dry run looks for them: it finds them READY instead of training a tokenizer and
    # building the model a second time, ~8 s of CPU that prove nothing the fixture has not.
    shutil.copytree(demo_assets.root, tmp_path / "home" / "demo-assets")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SCRIPT.parent.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--home", str(tmp_path / "home"), "--json", str(report)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "all items passed" in done.stdout
    items = {row["item"]: row for row in json.loads(report.read_text())["items"]}
    assert items["qlora"]["result"] == "skip" and items["qlora"]["detail"] == "skipped: needs CUDA"
    for name in ("lora", "stop-and-save, resume", "export merged"):
        assert items[name]["result"] == "pass", items[name]
    assert items["lora"]["peak_allocated_gb"] > 0
    assert "resumed at" in items["stop-and-save, resume"]["detail"]


def stand_in(real, answer):
    """A stand-in for `real` that first binds its arguments to `real`'s signature."""
    def call(*args, **kwargs):
        inspect.signature(real).bind(*args, **kwargs)
        return answer(*args, **kwargs) if callable(answer) else answer
    return call


@pytest.fixture
def stand_in_gpu(tmp_path, monkeypatch):
    """A CUDA machine as far as gpu_check can tell without using the device; returns the
    builds it was asked for."""
    builds = []

    def build(shape, folder, gpu_pin, cuda):
        builds.append({"shape": shape, "folder": folder, "cuda": cuda})
        return dict(STAND_IN_H100)

    monkeypatch.setattr(gpu, "cuda_visible", stand_in(gpu.cuda_visible, True))
    monkeypatch.setattr(gpu, "build_in_child", stand_in(gpu.build_in_child, build))
    # The data is first read by the first training run; naming its file builds nothing.
    monkeypatch.setattr(assets, "larger_assets", stand_in(assets.larger_assets, assets.LargerAssets(tmp_path / "data")))
    monkeypatch.setenv("TUNELAB_HOME", str(tmp_path / "home"))  # the check sets it; put back afterwards
    monkeypatch.setenv("TUNELAB_PREWARM", "0")
    # The first training item is where a real GPU is needed: in its place, a run's progress
    # events as its worker sends them, read by the check's own figures code.
    monkeypatch.setattr(gpu_check, "PLAN", [gpu_check.Item("reported figures", False, True, reported_run)])
    return builds


def reported_run(check: gpu_check.Check) -> gpu_check.Outcome:
    run_id = 7
    for step in range(1, 11):
        check.watcher({"type": "progress", "run_id": run_id, "step": step, "loss": 2.0, "num_tokens": TOKENS_PER_STEP * step,
                       "elapsed_seconds": SECONDS_PER_STEP * step, "peak_memory_gb": 3.5, "peak_memory_reserved_gb": 4.25})
    assert check.config()["model_name"] == str(check.model) and check.config()["batch_size"] == 8
    return gpu_check.Outcome(True, "progress events of a stand-in run", check.figures(run_id))


@pytest.mark.parametrize("peak_args, peak_flops, peak_note", [
    ([], 989e12, "989 TFLOP/s dense bf16"),
    (["--peak-tflops", "400"], 400e12, "--peak-tflops 400"),
])
def test_the_cuda_branch_runs_on_a_cpu_up_to_the_first_training_run(stand_in_gpu, tmp_path, capsys, peak_args,
                                                                     peak_flops, peak_note):
    report = tmp_path / "check.json"
    code = gpu_check.main(["--home", str(tmp_path / "home"), "--json", str(report), "--steps", "10", *peak_args])
    said = capsys.readouterr().out
    assert code == 0, said
    assert [b["shape"] for b in stand_in_gpu] == [gpu_check.SHAPE_HALF_B] and stand_in_gpu[0]["cuda"] is True
    result = json.loads(report.read_text())
    assert result["device"] == "NVIDIA H100 80GB HBM3 (80 GiB, compute capability 9.0)"
    assert "(0.49B matmul weights)" in said and peak_note in said
    (item,) = result["items"]
    assert item["result"] == "pass"
    assert item["tokens_per_s"] == pytest.approx(TOKENS_PER_STEP / SECONDS_PER_STEP)
    assert item["mfu"] == pytest.approx(TOKENS_PER_STEP / SECONDS_PER_STEP * 4 * STAND_IN_H100["n"] / peak_flops)
    assert item["peak_allocated_gb"] == 3.5 and item["peak_reserved_gb"] == 4.25
    assert f"MFU {item['mfu'] * 100:.1f}%" in said and "peak 3.50 GB / 4.25 GB reserved" in said
