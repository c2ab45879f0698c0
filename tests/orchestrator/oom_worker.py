"""The real worker, made to run out of GPU memory in the middle of training.

`oom_after_step_2` patches the Trainer's training step inside the child so that a fresh
run's third step raises what CUDA raises (`torch.OutOfMemoryError`, or the older
RuntimeError when OOM_AS_RUNTIME_ERROR=1); a resumed run trains normally. Everything
else — model, data, Trainer, checkpoints, events — is the real thing.
"""

from __future__ import annotations

import os

from tunelab.worker.entry import run_worker

OOM_TEXT = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB "
            "of which 1.06 GiB is free.")


def oom_after_step_2(config, events, stops) -> None:
    import torch
    from transformers import Trainer

    original = Trainer.training_step

    def training_step(self, *args, **kwargs):
        if config.get("resume_from") is None and self.state.global_step == 2:
            if os.environ.get("OOM_AS_RUNTIME_ERROR") == "1":
                raise RuntimeError(OOM_TEXT)
            raise torch.OutOfMemoryError(OOM_TEXT)
        return original(self, *args, **kwargs)

    Trainer.training_step = training_step
    run_worker(config, events, stops)
