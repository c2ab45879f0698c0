"""The process that starts a multi-GPU run's ranks and then waits on torchrun never
touches CUDA: a context there would hold memory on every GPU that no plan counts, and on
GPUs in EXCLUSIVE_PROCESS mode no rank could open its own. It still reads the GPUs' free
memory (for auto's FSDP rule), from `nvidia-smi`.

The launcher runs for real in a child interpreter, as the worker runs it, on a machine
with two GPUs by the stand-in `nvidia-smi` and a stand-in `torch` whose `torch.cuda`
records every use; the ranks it then starts fail at once (the stand-in has no
torch.distributed), which is after everything under test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

TUNELAB_ROOT = Path(__file__).resolve().parents[2]
# Two GPUs with 100 MiB free each: a 1 GiB model does not fit, so auto picks FSDP2 — only
# if the launcher read that free memory.
FAKE_SMI = "#!/bin/sh\necho '0, GPU-aaaa, 81920, 100, Fake H100'\necho '1, GPU-bbbb, 81920, 100, Fake H100'\n"
STAND_IN_TORCH = '''
"""A stand-in torch: any use of torch.cuda is written down (and fails)."""
import os, sys


class _RecordingCuda:
    def __getattr__(self, name):
        with open(os.environ["CUDA_USES"], "a") as uses:
            uses.write(f"{os.getpid()} torch.cuda.{name}\\n")
        raise RuntimeError(f"stand-in torch: torch.cuda.{name} used")


cuda = _RecordingCuda()
sys.modules["torch.cuda"] = cuda
'''
DRIVER = textwrap.dedent("""
    import json, os, queue, sys
    from tunelab.worker.context import WorkerContext
    from tunelab.worker.entry import run_in_context

    print(os.getpid(), flush=True)
    events = queue.Queue()
    run_in_context(json.loads(sys.argv[1]), WorkerContext(events))
    while not events.empty():
        print(json.dumps(events.get()), flush=True)
""")


def test_the_launcher_reads_free_memory_from_nvidia_smi_and_never_touches_cuda(tmp_path):
    tools, fake, model = tmp_path / "bin", tmp_path / "stand-in", tmp_path / "model"
    for folder in (tools, fake / "torch", model):
        folder.mkdir(parents=True)
    (tools / "nvidia-smi").write_text(FAKE_SMI)
    (tools / "nvidia-smi").chmod(0o755)
    (fake / "torch" / "__init__.py").write_text(STAND_IN_TORCH)
    with open(model / "model.safetensors", "wb") as weights:  # sparse: only its size is read
        weights.truncate(2**30)
    uses = tmp_path / "cuda-uses.txt"
    config = {"model_name": str(model), "local_datasets": [str(tmp_path / "rows.jsonl")], "training_type": "lora",
              "distributed": "auto", "backend": "torch",
              "output_dir": str(tmp_path / "out"), "learning_rate": 2e-4}
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}", "CUDA_USES": str(uses),
           "CUDA_VISIBLE_DEVICES": "0,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
           "PYTHONPATH": os.pathsep.join([str(fake), str(TUNELAB_ROOT)])}
    done = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(config)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    pid, *lines = done.stdout.splitlines()
    events = [json.loads(line) for line in lines]
    said = [e.get("message", "") for e in events if e["type"] == "status"]
    assert any("Starting 2 training processes with torchrun (fsdp" in m for m in said), said
    assert any(m.startswith("distributed=auto:") and "0.1 GiB" in m for m in said), said
    assert events[-1]["type"] == "error"  # the stand-in's ranks cannot train: expected, and after the launch
    # The ranks (torchrun's children) may import the stand-in; the launcher itself never used CUDA.
    launcher_uses = [line for line in (uses.read_text().splitlines() if uses.exists() else []) if line.split()[0] == pid]
    assert not launcher_uses, launcher_uses
