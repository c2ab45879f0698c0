"""Training-like load on every core, for measurements that must hold while a run trains.

`training_load()` starts one process per core, each multiplying float32 matrices with
torch (one intra-op thread each, so together they fill the cores as a training step's
matmuls do), waits until every one has finished its first multiply, and stops them on
exit. A spinning Python thread on one core is not the same: it leaves the other cores
idle and holds no memory bandwidth.
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from typing import Iterator

# Runs in each load process: import torch, report ready after the first multiply, loop.
LOOP = """
import sys, torch
torch.set_num_threads(1)
a = torch.randn(512, 512)
b = torch.randn(512, 512)
(a @ b).sum().item()
print("ready", flush=True)
while True:
    a = (a @ b).tanh()
"""
READY_LIMIT_S = 120


@contextmanager
def training_load(processes: int | None = None) -> Iterator[int]:
    """Keep `processes` (default: every core) busy with matmuls inside the block; yields
    how many were started."""
    count = processes or os.cpu_count() or 1
    started = [subprocess.Popen([sys.executable, "-c", LOOP], stdout=subprocess.PIPE, text=True)
               for _ in range(count)]
    try:
        for process in started:
            line = process.stdout.readline()  # blocks until that process multiplies
            if line.strip() != "ready":
                raise RuntimeError(f"a load process did not start (exit code {process.poll()})")
        yield count
    finally:
        for process in started:
            process.kill()
        for process in started:
            process.wait()
