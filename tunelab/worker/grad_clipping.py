"""Gradient clipping beyond the Trainer's total norm: per parameter (`max_grad_leaf_norm`)
and per element (`max_grad_value`), as a Trainer callback every family's trainer gets.

transformers clips by `max_grad_norm` and then calls `on_pre_optimizer_step`, once per
optimizer step (so after all of gradient accumulation's micro-batches), with the
gradients already unscaled: taking the grad norm, which it does on every step, unscales
an fp16 run's gradients first. Clipping here is therefore on the true gradients, after
the total-norm clip and before the optimizer reads them. The order total norm -> per
parameter -> per element keeps every bound: each later clip only shrinks gradients.
The logged `grad_norm` was taken before all of it, so it stays the pre-clip norm.

An fp16 overflow is not hidden by clamping an inf: the gradient scaler records the inf
when it unscales, before this callback, and still skips that step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from transformers import TrainerCallback

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


class GradientClipper(TrainerCallback):
    def __init__(self, leaf_norm: float | None, value: float | None):
        self.leaf_norm = leaf_norm or None  # 0 means off, as with max_grad_norm
        self.value = value or None

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        params = [p for p in model.parameters() if p.grad is not None]
        if self.leaf_norm is not None:
            # One call per parameter: torch's clip takes each sharded (FSDP2) gradient's
            # norm over all its shards, and scales without a host sync.
            for param in params:
                torch.nn.utils.clip_grad_norm_(param, self.leaf_norm)
        if self.value is not None:
            torch.nn.utils.clip_grad_value_(params, self.value)


def gradient_clipper(config: WorkerConfig) -> list[GradientClipper]:
    """The callback when the run asks for either clip, else none (nothing to do per step)."""
    leaf_norm, value = config.max_grad_leaf_norm, config.max_grad_value
    return [GradientClipper(leaf_norm, value)] if leaf_norm or value else []
