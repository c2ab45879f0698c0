"""Before a run starts: does the memory estimate fit the devices it gets, and if not,
refuse it or (memory_fit=auto) change what may change.

The budget of a GPU run is the smallest free memory among its GPUs, as `hardware`
lists them (nvidia-smi, or a torch probe child; the server never imports torch). Over
it, a run is refused with the estimate, the free memory and the fix — the settings
that would fit, found by the same search `auto` uses: gradient checkpointing on (where
it was left to auto), then a smaller micro-batch with more accumulation, always keeping
the effective batch (batch_size x gradient_accumulation_steps). memory_fit=auto applies
that change instead and says so; memory_fit=off skips the check.

Gradient checkpointing left to auto on a GPU is decided here too: it recomputes every
layer's forward in backward (about a third more compute a step), so it stays off when
the estimate without it fits with room to spare (`CHECKPOINTING_OFF_SHARE` of the free
memory: the estimate is not exact), and on otherwise, as before.

On a CPU the machine's available RAM is only a warning (the OS pages, other processes
come and go, and the estimate of a CPU process leaves out the libraries): a CPU run is
refused only when it could not fit in all of the RAM and swap there is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterator

from tunelab.config.run_config import MAX_ACCUMULATION_STEPS, ConfigError, RunConfig
from tunelab.memory.plan import GIB, Estimate, ModelShape, Settings, estimate

FIELD = "memory_fit"
# The terms named in a refusal: the largest few, so the message stays one readable line.
TERMS_SHOWN = 4
# A GPU run left to auto trains without gradient checkpointing when its estimate without
# it is at most this share of the free memory.
CHECKPOINTING_OFF_SHARE = 0.8


@dataclass(frozen=True)
class Budget:
    """What one device (one rank) of the run may use."""

    cuda: bool
    free_bytes: int  # CUDA: the least free memory among the run's GPUs; CPU: available RAM per process
    limit_bytes: int  # over this a run is refused: CUDA the free memory, CPU all RAM and swap per process
    where: str  # "GPU 0 (NVIDIA H100)", "this machine's RAM"


@dataclass(frozen=True)
class Fit:
    """The estimate of the run as it will start, what was changed, and what to tell."""

    estimate: Estimate
    changes: dict[str, Any]
    notes: tuple[str, ...]


def gib(value: int) -> str:
    return f"{value / GIB:.1f} GiB"


def _divisors_below(n: int) -> list[int]:
    return [d for d in range(n - 1, 0, -1) if n % d == 0]


def candidates(cfg: RunConfig, s: Settings, may_change_batch: bool) -> Iterator[tuple[dict[str, Any], Settings]]:
    """Changed settings in the order they are tried, each with its config changes. Only
    what is left to auto, or (with `may_change_batch`) the micro-batch, changes."""
    checkpoint: dict[str, Any] = {}
    if not s.gradient_checkpointing and cfg.gradient_checkpointing is None:
        checkpoint = {"gradient_checkpointing": True}
        s = replace(s, gradient_checkpointing=True)
        yield checkpoint, s
    if not may_change_batch:
        return
    effective = s.batch_size * s.gradient_accumulation_steps
    for batch in _divisors_below(s.batch_size):
        accumulation = effective // batch
        if accumulation > MAX_ACCUMULATION_STEPS:
            return
        changes = {**checkpoint, "batch_size": batch, "gradient_accumulation_steps": accumulation}
        yield changes, replace(s, batch_size=batch, gradient_accumulation_steps=accumulation)


def describe(changes: dict[str, Any]) -> str:
    parts = [f"{k}={'true' if v is True else v}" for k, v in changes.items()]
    return " and ".join(parts)


def checkpointing_off(cfg: RunConfig, shape: ModelShape, s: Settings, budget: Budget) -> Fit | None:
    """A GPU run with checkpointing left to auto that fits without it: the Fit that
    turns it off (and says why); None where checkpointing stays as it was."""
    if not budget.cuda or cfg.gradient_checkpointing is not None or not s.gradient_checkpointing:
        return None
    without = estimate(shape, replace(s, gradient_checkpointing=False))
    if without.total_bytes > budget.free_bytes * CHECKPOINTING_OFF_SHARE:
        return None
    return Fit(without, {"gradient_checkpointing": False},
               (f"memory: the run needs an estimated {gib(without.total_bytes)} per GPU without gradient checkpointing "
                f"and {budget.where} has {gib(budget.free_bytes)} free, so tunelab trains without it (no layer is "
                "recomputed; set gradient_checkpointing=true to keep it)",))


def check_fit(cfg: RunConfig, shape: ModelShape, s: Settings, budget: Budget) -> Fit:
    """The run's estimate against `budget`: a Fit (maybe with changes to apply), or a
    ConfigError on `memory_fit` naming the estimate, the free memory and the fix."""
    first = estimate(shape, s)
    auto = cfg.memory_fit == "auto"
    device = "per GPU" if budget.cuda else "per process"
    target = budget.free_bytes if budget.cuda else budget.limit_bytes
    if first.total_bytes <= target:
        if not budget.cuda and first.total_bytes > budget.free_bytes:
            return Fit(first, {}, (f"memory: the run needs an estimated {gib(first.total_bytes)} {device} and "
                                   f"{budget.where} has {gib(budget.free_bytes)} available; it may swap or be ended by the OS",))
        return Fit(first, {}, ())
    for changes, changed in candidates(cfg, s, may_change_batch=auto):
        trial = estimate(shape, changed)
        if trial.total_bytes <= target:
            note = (f"memory: the run as configured needs an estimated {gib(first.total_bytes)} {device} and "
                    f"{budget.where} has {gib(budget.free_bytes)} free, so tunelab set {describe(changes)} "
                    f"(estimate now {gib(trial.total_bytes)}; effective batch kept at "
                    f"{changed.batch_size * changed.gradient_accumulation_steps})")
            return Fit(trial, changes, (note,))
    raise ConfigError.single(FIELD, refusal(cfg, shape, s, first, budget))


def refusal(cfg: RunConfig, shape: ModelShape, s: Settings, first: Estimate, budget: Budget) -> str:
    device = "per GPU" if budget.cuda else "per process"
    largest = sorted(first.terms, key=lambda t: -t.bytes)[:TERMS_SHOWN]
    parts = ", ".join(f"{t.name} {gib(t.bytes)}" for t in largest)
    available = f"{budget.where} has {gib(budget.free_bytes)} free" if budget.cuda else \
        f"{budget.where} holds {gib(budget.limit_bytes)} in all (RAM and swap)"
    target = budget.free_bytes if budget.cuda else budget.limit_bytes
    return (f"the run needs an estimated {gib(first.total_bytes)} {device} ({parts}) but {available}. "
            f"To fit: {fixes(cfg, shape, s, target)}")


def fixes(cfg: RunConfig, shape: ModelShape, s: Settings, target: int) -> str:
    """The settings that would fit, tried in order; several alternatives where no simple one does."""
    for changes, changed in candidates(cfg, s, may_change_batch=True):
        if estimate(shape, changed).total_bytes <= target:
            return (f"set {describe(changes)} (the same effective batch), or set memory_fit=auto to let tunelab make "
                    "that change; or use a GPU with more free memory")
    smallest = replace(s, gradient_checkpointing=True, batch_size=1)
    options = []
    seq = s.max_seq_length
    while seq > 16 and estimate(shape, replace(smallest, max_seq_length=seq)).total_bytes > target:
        seq //= 2
    if seq < s.max_seq_length and seq >= 16:
        options.append(f"set batch_size=1, gradient_checkpointing=true and max_seq_length={seq} (now {s.max_seq_length})")
    if s.cuda and not s.load_in_4bit and estimate(shape, replace(smallest, training_type="qlora", load_in_4bit=True,
                                                                  strategy="ddp" if s.world_size > 1 else "none")).total_bytes <= target:
        options.append("use training_type=qlora (a 4-bit base) with batch_size=1 and gradient_checkpointing=true")
    if s.cuda and s.strategy != "fsdp" and not s.load_in_4bit:
        options.append("shard the model over more GPUs (num_gpus with distributed=fsdp)")
    options.append("or use a GPU with more free memory")
    return "; ".join(options)
