"""Trainer callbacks: progress events for the parent, and stopping on request.

`ProgressReporter` turns each HF log record (training or eval) into a `progress` event,
with the numbers beyond the fixed ones in its `extra` mapping.
In a distributed run both are called on every rank at the same steps, so each may use a
collective (ranks.py): the peaks are the largest over ranks, and the stop is agreed.
`StopOnRequest` checks the stop state at every step boundary: a stop-and-save asks the
Trainer to save `checkpoint-<step>` and stop; a cancel stops without saving (overriding a
save the Trainer had scheduled for that step, since a cancelled run keeps nothing).
"""

from __future__ import annotations

import re
import resource
import sys
import time
from typing import Any

import torch
from transformers import TrainerCallback

from tunelab import events
from tunelab.worker.launch import ranks


def peak_memory_gb() -> tuple[float, float | None]:
    """(allocated, reserved): the CUDA peaks of this run, what tensors held and what the
    caching allocator held (what other processes could not use); on CPU the process's
    peak resident memory, and no reserved figure."""
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**30, torch.cuda.max_memory_reserved() / 2**30
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak * (1 if sys.platform == "darwin" else 1024) / 2**30, None  # bytes on macOS, KiB on Linux


def memory_now_gb() -> float:
    """What the run holds now: CUDA memory allocated, or on a CPU the resident memory."""
    if torch.cuda.is_available():
        return torch.cuda.memory_allocated() / 2**30
    import psutil

    return psutil.Process().memory_info().rss / 2**30


# Logged numbers that are not about the model: run time and throughput (elapsed_seconds
# covers time) and the FLOP count. Everything else numeric rides along as `extra`.
NOT_EXTRA = re.compile(r"(.*_)?(runtime|samples_per_second|steps_per_second)|total_flos")


def extra_numbers(logs: dict[str, Any]) -> dict[str, float]:
    """What the Trainer logged beyond the fixed progress numbers (TRL's mean_token_accuracy
    and entropy, eval_mean_token_accuracy, a method's own metrics), within events' bounds."""
    return events.clean_extra({name: value for name, value in logs.items() if not NOT_EXTRA.fullmatch(name)})


class ProgressReporter(TrainerCallback):
    def __init__(self, ctx: Any):
        self.ctx = ctx
        self._started = time.monotonic()
        self._first_step = 0

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._started = time.monotonic()
        self._first_step = state.global_step  # above 0 when resuming
        if torch.cuda.is_available():
            # Peaks are per process; a run's figures start with its own training.
            torch.cuda.reset_peak_memory_stats()

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        logs = logs or {}
        if "loss" not in logs and "eval_loss" not in logs:
            return  # the end-of-training summary repeats nothing new
        step = state.global_step
        elapsed = time.monotonic() - self._started
        done = step - self._first_step
        eta = elapsed / done * max(0, state.max_steps - step) if done > 0 else None
        tokens = state.num_input_tokens_seen or logs.get("num_tokens")
        finite = events.finite_or_none
        allocated, reserved = ranks.largest(list(peak_memory_gb()))  # on every rank: a collective
        self.ctx.emit(events.progress(
            step,
            total_steps=state.max_steps,
            epoch=finite(state.epoch),
            loss=finite(logs.get("loss")),
            learning_rate=finite(logs.get("learning_rate")),
            grad_norm=finite(logs.get("grad_norm")),
            eval_loss=finite(logs.get("eval_loss")),
            num_tokens=int(tokens) if finite(tokens) is not None else None,
            elapsed_seconds=elapsed,
            eta_seconds=eta,
            peak_memory_gb=allocated,
            peak_memory_reserved_gb=reserved,
            extra=extra_numbers(logs),
        ))


class StopOnRequest(TrainerCallback):
    def __init__(self, ctx: Any):
        self.ctx = ctx
        self.stopped_at: int | None = None  # the step at which this callback ended training

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        # Every rank asks at every step (one small all-reduce): only the reporting rank
        # hears the parent, and all must stop at the same step to save one checkpoint.
        stop = ranks.agree_on_stop(self.ctx.stop)
        if stop is None:
            return control
        if stop != self.ctx.stop:
            self.ctx.request_stop(save=stop == "save")
        self.stopped_at = state.global_step
        control.should_training_stop = True
        control.should_save = stop == "save"
        # Log this step even between logging_steps, so the parent's last step is the one stopped at.
        control.should_log = True
        control.should_evaluate = False
        return control
