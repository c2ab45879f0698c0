"""The MLX training loop: batch plan, masked loss, learning-rate schedule, one optimizer step.

Written by hand rather than through `mlx_lm.tuner.train` because resume must be exact:
mlx-lm counts micro-batches (not optimizer steps), has no start iteration and shuffles
with numpy's global RNG. Here the step number is the optimizer step (as in HF Trainer),
the micro-batches of step `s` are a pure function of (seed, epoch, s), and dropout is
re-seeded from (seed, s) — so a run resumed at step N replays steps N+1.. exactly as the
uninterrupted run would. Labels follow the HF convention: aligned with `input_ids`, -100
where no loss is taken, shifted by one inside the loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Iterator

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_map

from tunelab.config.run_config import MLX_LR_SCHEDULERS
from tunelab.worker.data.prepare import IGNORE_INDEX

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


Row = dict[str, list[int]]  # one tokenized example: input_ids and labels


@dataclass(frozen=True)
class BatchPlan:
    """Which rows form each micro-batch of each optimizer step.

    An epoch is a permutation of the rows drawn from (seed, epoch), cut into micro-batches
    of `batch_size` (the last may be smaller); each step takes `accumulation` micro-batches,
    and the epoch's last step also takes any left over, so no row is skipped.
    """

    num_rows: int
    batch_size: int
    accumulation: int
    seed: int

    @property
    def micro_batches_per_epoch(self) -> int:
        return math.ceil(self.num_rows / self.batch_size)

    @property
    def steps_per_epoch(self) -> int:
        return max(1, self.micro_batches_per_epoch // self.accumulation)

    def total_steps(self, max_steps: int, num_epochs: float) -> int:
        if max_steps > 0:
            return max_steps
        return max(1, math.ceil(num_epochs * self.steps_per_epoch))

    def epoch_of(self, step: int) -> float:
        """HF-style fractional epoch after `step` optimizer steps."""
        return step / self.steps_per_epoch

    def rows_for_step(self, step: int) -> list[list[int]]:
        """Row indices of each micro-batch of optimizer step `step` (1-based)."""
        epoch, index = divmod(step - 1, self.steps_per_epoch)
        micro = self._micro_batches(epoch)
        first = index * self.accumulation
        last = len(micro) if index == self.steps_per_epoch - 1 else first + self.accumulation
        return micro[first:last]

    @lru_cache(maxsize=2)
    def _micro_batches(self, epoch: int) -> list[list[int]]:
        order = np.random.default_rng([self.seed, epoch]).permutation(self.num_rows)
        return [order[i : i + self.batch_size].tolist() for i in range(0, self.num_rows, self.batch_size)]


def pad_batch(rows: list[Row], pad_id: int) -> tuple[mx.array, mx.array]:
    """Right-pad `input_ids` with the pad token and `labels` with -100 to the longest row."""
    width = max(len(r["input_ids"]) for r in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int32)
    labels = np.full((len(rows), width), IGNORE_INDEX, dtype=np.int32)
    for i, row in enumerate(rows):
        n = len(row["input_ids"])
        ids[i, :n] = row["input_ids"]
        labels[i, :n] = row["labels"]
    return mx.array(ids), mx.array(labels)


def loss_sum(model: nn.Module, inputs: mx.array, labels: mx.array) -> tuple[mx.array, mx.array]:
    """Summed cross-entropy over labelled positions, and how many there were.

    Summing (not averaging) per micro-batch lets a step divide by the token count of all
    its micro-batches, so every labelled token weighs the same however rows are batched.
    """
    logits = model(inputs)[:, :-1]
    targets = labels[:, 1:]
    mask = targets != IGNORE_INDEX
    ce = nn.losses.cross_entropy(logits, mx.where(mask, targets, 0)) * mask
    return ce.astype(mx.float32).sum(), mask.sum()


def warmup_steps_for(config: WorkerConfig, total_steps: int) -> int:
    if config.warmup_steps is not None:
        return int(config.warmup_steps)
    if config.warmup_ratio is not None:
        return math.ceil(float(config.warmup_ratio) * total_steps)
    return 0


def make_schedule(kind: str, base_lr: float, warmup: int, total: int) -> Callable[[mx.array], mx.array]:
    """The learning rate for the update after `step` earlier updates, as HF's schedulers give it."""
    if kind not in MLX_LR_SCHEDULERS:  # config validation refuses these before a run starts
        raise ValueError(f"lr_scheduler_type {kind!r} is not available with backend=mlx; use one of {list(MLX_LR_SCHEDULERS)}")
    warmup = 0 if kind == "constant" else warmup

    def schedule(step: mx.array) -> mx.array:
        step = step.astype(mx.float32)
        rising = base_lr * step / max(1, warmup)
        progress = mx.clip((step - warmup) / max(1, total - warmup), 0.0, 1.0)
        if kind == "linear":
            after = base_lr * (1.0 - progress)
        elif kind == "cosine":
            after = base_lr * 0.5 * (1.0 + mx.cos(math.pi * progress))
        else:
            after = mx.array(base_lr, mx.float32)
        return mx.where(step < warmup, rising, after)

    return schedule


def make_optimizer(config: WorkerConfig, total_steps: int) -> optim.AdamW:
    schedule = make_schedule(
        config.lr_scheduler_type,
        config.learning_rate,
        warmup_steps_for(config, total_steps),
        total_steps,
    )
    # bias_correction matches torch's AdamW, which the other backend uses.
    return optim.AdamW(learning_rate=schedule, weight_decay=config.weight_decay, bias_correction=True)


@dataclass
class StepResult:
    loss: float
    grad_norm: float
    learning_rate: float
    input_tokens: int


@dataclass(frozen=True)
class GradientClips:
    """The run's gradient clips in the torch backend's order, each 0 for off: the total
    norm (max_grad_norm, whose pre-clip value is the logged grad_norm), then each
    parameter's norm (max_grad_leaf_norm), then each element (max_grad_value). Each later
    clip only shrinks gradients, so every bound holds at the end."""

    total_norm: float = 0.0
    leaf_norm: float = 0.0
    value: float = 0.0

    @classmethod
    def from_config(cls, config: WorkerConfig) -> "GradientClips":
        bounds = (config.max_grad_norm, config.max_grad_leaf_norm, config.max_grad_value)
        return cls(*(max(0.0, bound or 0.0) for bound in bounds))  # None (the two optional ones) and 0 are off

    def apply(self, grads: Any) -> tuple[Any, mx.array]:
        grads, norm = optim.clip_grad_norm(grads, self.total_norm if self.total_norm > 0 else math.inf)
        if self.leaf_norm > 0:
            grads = tree_map(self._leaf, grads)
        if self.value > 0:
            grads = tree_map(lambda g: mx.clip(g, -self.value, self.value), grads)
        return grads, norm

    def _leaf(self, g: mx.array) -> mx.array:
        # torch's clip_grad_norm_ formula, so both backends scale a parameter alike.
        norm = mx.sqrt(mx.sum(mx.square(g.astype(mx.float32))))
        return (g * mx.minimum(1.0, self.leaf_norm / (norm + 1e-6))).astype(g.dtype)


class Trainer:
    """Runs optimizer steps and evaluations on prepared rows; holds no run bookkeeping."""

    def __init__(self, model: nn.Module, optimizer: optim.Optimizer, train_rows: list[Row], eval_rows: list[Row] | None,
                 plan: BatchPlan, pad_id: int, clips: GradientClips, seed: int):
        self.model = model
        self.optimizer = optimizer
        self.train_rows = train_rows
        self.eval_rows = eval_rows
        self.plan = plan
        self.pad_id = pad_id
        self.clips = clips
        self.seed = seed
        self._loss_and_grad = nn.value_and_grad(model, loss_sum)

    def steps(self, first: int, last: int, should_stop: Callable[[], bool]) -> Iterator[tuple[int, StepResult]]:
        """Run steps first..last, yielding after each; checks `should_stop` before each step."""
        self.model.train()
        for step in range(first, last + 1):
            if should_stop():
                return
            yield step, self.step(step)

    def step(self, step: int) -> StepResult:
        # Dropout masks depend only on (seed, step), so a resumed run draws the same ones.
        mx.random.seed((self.seed * 1_000_003 + step) % 2**63)
        grads, total, labelled, tokens = None, mx.array(0.0), mx.array(0), 0
        for indices in self.plan.rows_for_step(step):
            rows = [self.train_rows[i] for i in indices]
            inputs, labels = pad_batch(rows, self.pad_id)
            (summed, count), micro_grads = self._loss_and_grad(self.model, inputs, labels)
            grads = micro_grads if grads is None else tree_map(mx.add, grads, micro_grads)
            total, labelled = total + summed, labelled + count
            tokens += sum(len(r["input_ids"]) for r in rows)
            mx.eval(grads, total, labelled)  # keep each micro-batch's graph from piling up
        denominator = mx.maximum(labelled, 1).astype(mx.float32)
        grads = tree_map(lambda g: g / denominator, grads)
        grads, norm = self.clips.apply(grads)
        self.optimizer.update(self.model, grads)
        mx.eval(self.model.parameters(), self.optimizer.state, norm)
        return StepResult(
            loss=(total / denominator).item(),
            grad_norm=norm.item(),
            # The schedule value this update used (the state holds it until the next update).
            learning_rate=self.optimizer.learning_rate.item(),
            input_tokens=tokens,
        )

    def evaluate(self) -> float | None:
        """Mean loss per labelled token over the whole eval set, in a fixed order."""
        if not self.eval_rows:
            return None
        self.model.eval()
        total, labelled = 0.0, 0
        size = self.plan.batch_size
        for start in range(0, len(self.eval_rows), size):
            rows = self.eval_rows[start : start + size]
            summed, count = loss_sum(self.model, *pad_batch(rows, self.pad_id))
            mx.eval(summed, count)
            total, labelled = total + summed.item(), labelled + count.item()
        self.model.train()
        return total / labelled if labelled else None
