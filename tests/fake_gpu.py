"""A server environment with a device inventory of one GPU (or a few) and slow scripted runs,
so a second start waits in the queue: a stand-in `nvidia-smi` first on the PATH (a real
program the scheduler runs) reporting one idle 80 GB GPU, and the scripted trainer of
tests/orchestrator instead of the real one (the runs never touch the GPU)."""

from __future__ import annotations

import os
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def smi_script(gpus: int) -> str:
    lines = "".join(f"echo '{i}, GPU-{i:04d}, 81920, 81920, NVIDIA Test {i}'\n" for i in range(gpus))
    return "#!/bin/sh\n" + lines


def one_gpu_env(folder: Path, step_seconds: float = 0.2, gpus: int = 1) -> dict[str, str]:
    """Environment for `python -m tunelab.server`; each scripted step takes `step_seconds`.
    `gpus`: how many idle GPUs the stand-in reports (one unless a test needs two at work)."""
    bin_dir = folder / "fake-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(smi_script(gpus))
    smi.chmod(0o755)
    python_path = [str(TESTS / "orchestrator"), str(TESTS), os.environ.get("PYTHONPATH", "")]
    return {"TUNELAB_WORKER_TARGET": "scripted_workers:trainer", "TUNELAB_PREWARM": "0",
            "SCRIPTED_STEP_SECONDS": str(step_seconds), "PYTHONPATH": os.pathsep.join(p for p in python_path if p),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
