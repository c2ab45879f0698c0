"""The chain of runs a resumed run continues (tunelab.orchestrator.resume_chain), on a real SQLite store:
each earlier run's steps up to the step its successor resumed from, oldest first; a walk
that stops at a run its reader may not see or that is gone; and the line `tunelab show`
prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunelab.orchestrator.resume_chain import describe, earlier_runs, metric_rows_until, resumed_at_step
from tunelab.store import Store


@pytest.fixture
def store(tmp_path: Path):
    with Store(tmp_path / "runs.db") as opened:
        yield opened


def add_run(store: Store, steps: range, *, parent: int | None = None, resumed_at: int | None = None,
            owner: str | None = None) -> int:
    config = {"model_name": "tiny", "resume_from": f"/outputs/tiny/checkpoint-{resumed_at}" if resumed_at else None}
    run_id = store.create_run(config, "tiny", "data", None, parent, owned_by=owner)
    store.add_metrics(run_id, [{"step": s, "loss": 10.0 - s / 10, "extra": {"mean_token_accuracy": s / 100}} for s in steps])
    store.finalize_run(run_id, status="stopped", final_step=steps[-1])
    if parent is not None:
        store.mark_resumed(parent, run_id)
    return run_id


def test_a_chain_of_three_gives_each_earlier_run_up_to_the_step_its_successor_resumed_from(store):
    # The first run logged steps past its last checkpoint (it failed at step 7 after saving 5).
    first = add_run(store, range(1, 8))
    second = add_run(store, range(6, 13), parent=first, resumed_at=5)
    third = add_run(store, range(11, 16), parent=second, resumed_at=10)

    chain = earlier_runs(store, store.get_run(third))
    assert [(part.run["id"], part.until_step) for part in chain] == [(first, 5), (second, 10)]
    rows, extras = metric_rows_until(store, first, 5)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert extras["mean_token_accuracy"]["steps"] == [1, 2, 3, 4, 5]
    # Together with the run's own steps the curve has every step once.
    steps = [r["step"] for part in chain for r in metric_rows_until(store, part.run["id"], part.until_step)[0]]
    assert steps + [r["step"] for r in store.get_metrics(third)] == list(range(1, 16))
    assert earlier_runs(store, store.get_run(first)) == []
    assert describe(store.get_run(third), chain) == f"resumed from run {second} at step 10, which resumed from run {first} at step 5"
    assert describe(store.get_run(first), []) is None


def test_the_walk_stops_at_a_run_the_reader_may_not_see_and_at_a_deleted_one(store):
    first = add_run(store, range(1, 4), owner="alice")
    second = add_run(store, range(4, 7), parent=first, resumed_at=3, owner="bob")
    third = add_run(store, range(7, 9), parent=second, resumed_at=6, owner="bob")

    bobs = earlier_runs(store, store.get_run(third), may_read=lambda row: row.get("owner") == "bob")
    assert [part.run["id"] for part in bobs] == [second]  # alice's run, and anything before it, stays out

    store.delete_run(second)
    assert earlier_runs(store, store.get_run(third)) == []
    assert describe(store.get_run(third), []) == f"resumed from run {second} at step 6 (no longer in the history)"


def test_the_resume_step_is_read_from_the_checkpoint_folder_the_run_started_from():
    assert resumed_at_step({"config": {"resume_from": "/o/run/checkpoint-40"}}) == 40
    assert resumed_at_step({"config": {"resume_from": None}}) is None
    assert resumed_at_step({"config": {"resume_from": "/o/run/somewhere"}}) is None
    assert resumed_at_step({"config": {}}) is None
