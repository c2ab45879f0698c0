"""max_grad_leaf_norm and max_grad_value bound the gradients the optimizer reads, in a real
worker run with gradient accumulation 2 and bf16 autocast on the CPU, and the logged
grad_norm stays the norm before any clipping."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from gradient_recorder import run_worker_recording_gradients
from spawned_worker import SpawnedWorker, demo_config

from tunelab import events as ev

pytestmark = pytest.mark.slow

LEAF_NORM, VALUE = 0.02, 0.002
STEPS = 3


def _run(demo_assets, out: Path, **overrides) -> tuple[list[dict], list[dict]]:
    """(what the optimizer read at each step, the progress events) of a short run."""
    config = demo_config(demo_assets, out, max_steps=STEPS, batch_size=2, gradient_accumulation_steps=2,
                         precision="bf16", **overrides)
    record = out.parent / f"{out.name}-gradients.jsonl"
    worker = SpawnedWorker(config, run_worker_recording_gradients, (str(record),))
    try:
        final = worker.finish()
    finally:
        worker.kill()
    assert final["type"] == ev.COMPLETE, final
    steps = [json.loads(line) for line in record.read_text().splitlines()]
    return steps, worker.progress()


def test_the_optimizer_reads_clipped_gradients_and_the_log_keeps_the_pre_clip_norm(demo_assets, tmp_path):
    plain, plain_progress = _run(demo_assets, tmp_path / "plain", max_grad_norm=0)
    clipped, clipped_progress = _run(demo_assets, tmp_path / "clipped", max_grad_norm=1.0,
                                     max_grad_leaf_norm=LEAF_NORM, max_grad_value=VALUE)
    assert len(plain) == len(clipped) == STEPS  # one optimizer step per two micro-batches

    # Unclipped, the gradients exceed both bounds, so the bounds below are the clips' doing.
    assert all(step["max_abs"] > 2 * VALUE and max(step["norms"]) > 2 * LEAF_NORM for step in plain)
    for step in clipped:
        assert step["max_abs"] <= VALUE * (1 + 1e-6)
        assert max(step["norms"]) <= LEAF_NORM * (1 + 1e-4)

    # Before the first update both runs hold the same weights and data: the same gradients.
    # Unclipped, the optimizer read the norm the log shows; clipped, the log still shows it.
    first_norm = math.sqrt(sum(n * n for n in plain[0]["norms"]))
    assert plain_progress[0]["grad_norm"] == pytest.approx(first_norm, rel=1e-3)
    assert clipped_progress[0]["grad_norm"] == pytest.approx(first_norm, rel=1e-3)
    assert math.sqrt(sum(n * n for n in clipped[0]["norms"])) < first_norm / 2
