"""The pieces of the MLX training loop that make resume exact and the loss honest."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core", reason="MLX is not installed (pip install -e '.[mlx]')")
nn = pytest.importorskip("mlx.nn")

import mlx.optimizers as optim  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402

from typed_config import typed
from tunelab.worker.backends.mlx.loop import IGNORE_INDEX, BatchPlan, GradientClips, Trainer, loss_sum, make_schedule, pad_batch  # noqa: E402

pytestmark = pytest.mark.mlx


def test_every_epoch_uses_every_row_once_in_an_order_fixed_by_seed_and_epoch():
    plan = BatchPlan(num_rows=23, batch_size=4, accumulation=2, seed=5)
    assert plan.micro_batches_per_epoch == 6 and plan.steps_per_epoch == 3
    for epoch in range(2):
        steps = range(epoch * plan.steps_per_epoch + 1, (epoch + 1) * plan.steps_per_epoch + 1)
        rows = [i for step in steps for micro in plan.rows_for_step(step) for i in micro]
        assert sorted(rows) == list(range(23))
    again = BatchPlan(num_rows=23, batch_size=4, accumulation=2, seed=5)
    assert [again.rows_for_step(s) for s in range(1, 7)] == [plan.rows_for_step(s) for s in range(1, 7)]
    assert plan.rows_for_step(1) != plan.rows_for_step(4)  # epoch 2 is reshuffled
    assert BatchPlan(23, 4, 2, seed=6).rows_for_step(1) != plan.rows_for_step(1)


def test_total_steps_from_epochs_or_max_steps():
    plan = BatchPlan(num_rows=100, batch_size=2, accumulation=4, seed=0)
    assert plan.steps_per_epoch == 12
    assert plan.total_steps(max_steps=0, num_epochs=1.5) == 18
    assert plan.total_steps(max_steps=7, num_epochs=3) == 7
    tiny = BatchPlan(num_rows=3, batch_size=2, accumulation=4, seed=0)
    assert tiny.steps_per_epoch == 1 and len(tiny.rows_for_step(1)) == 2  # fewer micro-batches than accumulation


@pytest.mark.parametrize("kind", ["linear", "cosine", "constant", "constant_with_warmup"])
def test_schedule_matches_the_hf_scheduler_the_torch_backend_uses(kind):
    torch = pytest.importorskip("torch")
    from transformers.optimization import get_scheduler

    total, warmup, base = 20, 4, 3e-4
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=base)
    reference = get_scheduler(kind, optimizer, num_warmup_steps=warmup, num_training_steps=total)
    schedule = make_schedule(kind, base, warmup, total)
    for step in range(total):
        assert schedule(mx.array(step)).item() == pytest.approx(reference.get_last_lr()[0], rel=1e-5, abs=1e-12)
        optimizer.step()
        reference.step()


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 8)
        self.head = nn.Linear(8, 11)

    def __call__(self, ids):
        return self.head(self.embed(ids))


def test_loss_counts_only_labelled_tokens_and_ignores_padding():
    mx.random.seed(0)
    model = TinyLM()
    short = {"input_ids": [1, 2, 3, 4], "labels": [IGNORE_INDEX, IGNORE_INDEX, 3, 4]}
    long = {"input_ids": [5, 6, 7, 8, 9, 10, 2], "labels": [5, 6, 7, 8, 9, 10, 2]}
    alone_sum, alone_count = loss_sum(model, *pad_batch([short], pad_id=0))
    assert alone_count.item() == 2  # the two labelled tokens after the shift; nothing else
    batched_sum, batched_count = loss_sum(model, *pad_batch([short, long], pad_id=0))
    long_sum, long_count = loss_sum(model, *pad_batch([long], pad_id=0))
    # Padding the short row to the long one's length adds no scored position.
    assert batched_count.item() == alone_count.item() + long_count.item() == 2 + 6
    assert batched_sum.item() == pytest.approx(alone_sum.item() + long_sum.item(), rel=1e-5)


class RecordingAdamW(optim.AdamW):
    """AdamW that keeps, for each update, the gradients it was handed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []

    def update(self, model, gradients):
        self.seen.append([g for _, g in tree_flatten(gradients)])
        super().update(model, gradients)


def _steps_with(clips: GradientClips, steps: int = 3):
    mx.random.seed(0)
    model = TinyLM()
    rows = [{"input_ids": [1 + (i + j) % 10 for j in range(6)], "labels": [1 + (i + j) % 10 for j in range(6)]} for i in range(16)]
    optimizer = RecordingAdamW(learning_rate=1e-2)
    trainer = Trainer(model, optimizer, rows, None, BatchPlan(len(rows), batch_size=2, accumulation=2, seed=1), 0, clips, seed=1)
    norms = [trainer.step(step).grad_norm for step in range(1, steps + 1)]
    return optimizer.seen, norms


def test_leaf_norm_and_value_clips_bound_what_the_optimizer_reads_and_the_logged_norm_is_before_them():
    plain, plain_norms = _steps_with(GradientClips())
    leaf, value = 0.05, 0.01
    clipped, clipped_norms = _steps_with(GradientClips(total_norm=1.0, leaf_norm=leaf, value=value))
    largest = lambda grads: max(mx.abs(g).max().item() for g in grads)  # noqa: E731
    leaf_norms = lambda grads: [mx.sqrt(mx.sum(g * g)).item() for g in grads]  # noqa: E731
    assert all(largest(grads) > 2 * value and max(leaf_norms(grads)) > 2 * leaf for grads in plain)
    for grads in clipped:
        assert largest(grads) <= value * (1 + 1e-6)
        assert max(leaf_norms(grads)) <= leaf * (1 + 1e-4)
    # Same weights and rows before the first update: the logged norm is the unclipped one.
    unclipped = sum(n * n for n in leaf_norms(plain[0])) ** 0.5
    assert plain_norms[0] == pytest.approx(unclipped, rel=1e-4)
    assert clipped_norms[0] == pytest.approx(unclipped, rel=1e-4)


def test_clips_read_from_the_config_with_empty_as_off():
    assert GradientClips.from_config(typed({"max_grad_norm": 1.0, "max_grad_leaf_norm": None})) == GradientClips(1.0, 0.0, 0.0)
    assert GradientClips.from_config(typed({"max_grad_norm": -1, "max_grad_leaf_norm": 0.5, "max_grad_value": 0.1})) == GradientClips(0.0, 0.5, 0.1)
