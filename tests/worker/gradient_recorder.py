"""A spawn target that runs the real worker while recording the gradients every optimizer
step reads: a global optimizer step pre-hook, so it sees them after every clip the
Trainer and its callbacks made, exactly as the optimizer does. One JSON line per step:
the largest |element| over all gradients and each parameter's gradient norm."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tunelab.worker.entry import run_worker


def run_worker_recording_gradients(config: dict[str, Any], events: Any, stops: Any, record: str) -> None:
    import torch
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    def before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        line = {"max_abs": max(g.abs().max().item() for g in grads),
                "norms": [torch.linalg.vector_norm(g.float()).item() for g in grads]}
        with Path(record).open("a") as out:  # written as it goes: the worker leaves through os._exit
            out.write(json.dumps(line) + "\n")

    register_optimizer_step_pre_hook(before_step)
    run_worker(config, events, stops)
