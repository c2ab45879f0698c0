"""Two gloo ranks under `torchrun --standalone`, through the orchestrator and the real
worker, on the demo's tiny Llama: the same losses as one process with the same global
batch; stop-and-save on every rank at one step, refused on another world size, resumed;
kill -9 of rank 1; cancel. Each run is a few steps: most of a 2-rank run's ~25 s is three
processes importing torch on two cores."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest
from dist_helpers import WAIT_S, alive, descendants, is_torchrun, ranks_under, two_rank_config, wait_until

from tunelab.checkpoints import validate_checkpoint
from tunelab.config.run_config import ConfigError
from tunelab.demos.text import demo_config

pytestmark = pytest.mark.slow

# Relative tolerance of the 2-rank losses against one process's. The two compute the same
# sums in another order (each rank's micro-batch, then gloo's all-reduce of the gradients,
# instead of one batch of 4), which in fp32 moves a result by a few units of 1.2e-7 per
# step, a little more after a few Adam updates. 1e-4 leaves room for that on any CPU and
# is far below what a real difference makes: ranks training on the same rows instead of
# disjoint halves change which tokens a logged loss averages, and a gradient or loss
# averaged over the wrong count changes every update. Measured here: identical to the
# last bit.
LOSS_RTOL = 1e-4
KILL_TO_RECORDED_S = 10  # issue 11: a killed rank's run is recorded `error` within 10 s


def _finished(orchestrator, run_id: int) -> dict:
    assert orchestrator.wait_idle(WAIT_S), f"run {run_id} did not finish within {WAIT_S} s"
    return orchestrator.store.get_run(run_id)


def _progress(recorder, run_id: int, at_least: int = 1) -> None:
    recorder.wait_for(lambda e: e["type"] == "progress" and e.get("run_id") == run_id and e["step"] >= at_least,
                      timeout=WAIT_S)


def _processes_of(orchestrator) -> tuple[dict[int, psutil.Process], list[psutil.Process]]:
    """(ranks by global rank, torchrun's own process) of the active run."""
    worker = orchestrator.snapshot()["worker_pid"]
    ranks = ranks_under(worker)
    assert sorted(ranks) == [0, 1], f"expected ranks 0 and 1 under worker {worker}, found {sorted(ranks)}"
    torchrun = [p for p in descendants(worker) if is_torchrun(p)]
    assert len(torchrun) == 1
    return ranks, torchrun


def test_two_ranks_log_the_losses_and_tokens_of_one_process_with_the_same_global_batch(real_orchestrator, store, demo_assets):
    orch, recorder = real_orchestrator
    # Not the defaults: a logged step averages two steps of two accumulated micro-batches.
    settings = {"steps": 6, "save_steps": 6, "logging_steps": 2, "gradient_accumulation_steps": 2}
    two = orch.start(two_rank_config(demo_assets, **settings))  # 2 ranks x batch 2
    two_row = _finished(orch, two)
    one = orch.start(demo_config(demo_assets, batch_size=4, **settings))
    one_row = _finished(orch, one)
    assert two_row["status"] == one_row["status"] == "completed", (two_row["error_message"], one_row["error_message"])

    statuses = [e["message"] for e in recorder.of_type("status") if e.get("run_id") == two]
    assert any("torchrun" in s and "world size 2" in s for s in statuses), statuses
    # Both ranks took part in the final save (one RNG state each).
    assert validate_checkpoint(Path(two_row["output_dir"]) / "checkpoint-6").world_size == 2

    two_metrics, one_metrics = store.get_metrics(two), store.get_metrics(one)
    assert [m["step"] for m in two_metrics] == [m["step"] for m in one_metrics] == [2, 4, 6]
    for ranked, single in zip(two_metrics, one_metrics):
        assert ranked["loss"] == pytest.approx(single["loss"], rel=LOSS_RTOL), (ranked, single)
        # Tokens are summed over the ranks: together they saw what the one process saw.
        assert ranked["num_tokens"] == single["num_tokens"] and single["num_tokens"] > 0
    assert two_row["final_step"] == one_row["final_step"] == 6


def test_stop_and_save_on_two_ranks_then_resume_continues_the_global_step(real_orchestrator, store, demo_assets):
    orch, recorder = real_orchestrator
    first = orch.start(two_rank_config(demo_assets, steps=10))
    _progress(recorder, first)
    orch.stop(save=True, expected_run_id=first)
    row = _finished(orch, first)
    assert row["status"] == "stopped", row["error_message"]
    stopped_at = row["final_step"]
    assert 1 <= stopped_at < 10
    # One checkpoint, written at the step every rank agreed on, with each rank's RNG state.
    checkpoint = Path(row["output_dir"]) / f"checkpoint-{stopped_at}"
    info = validate_checkpoint(checkpoint)
    assert (info.step, info.world_size) == (stopped_at, 2)
    assert (checkpoint / "rng_state_0.pth").is_file() and (checkpoint / "rng_state_1.pth").is_file()

    # On one process it is refused before anything starts, saying the world size to use.
    runs_before = store.count_runs()
    with pytest.raises(ConfigError) as refused:
        orch.start(demo_config(demo_assets, steps=10, batch_size=4), resume_run_id=first)
    assert refused.value.errors[0].field == "num_processes"
    assert "world size 2" in str(refused.value) and "num_processes=2" in str(refused.value)
    assert store.count_runs() == runs_before and store.get_run(first)["resumed_by_run_id"] is None

    second = orch.resume(first)  # the stored config: 2 ranks again
    resumed = _finished(orch, second)
    assert resumed["status"] == "completed", resumed["error_message"]
    assert resumed["resumed_from_run_id"] == first and resumed["final_step"] == 10
    assert [m["step"] for m in store.get_metrics(second)] == list(range(stopped_at + 1, 11))


def test_kill_9_of_rank_1_fails_the_run_naming_it_and_leaves_no_rank(real_orchestrator, store, demo_assets):
    orch, recorder = real_orchestrator
    run_id = orch.start(two_rank_config(demo_assets, steps=400))
    _progress(recorder, run_id, at_least=2)
    ranks, torchrun = _processes_of(orch)

    ranks[1].kill()
    killed_at = time.monotonic()
    ended = wait_until(lambda: store.get_run(run_id)["status"] != "running", timeout=60)
    recorded_after = time.monotonic() - killed_at
    print(f"rank 1 killed: run recorded `error` after {recorded_after:.2f} s")  # a figure for RELIABILITY.md
    assert ended, "the run was not recorded as ended within 60 s of the kill"
    assert recorded_after <= KILL_TO_RECORDED_S, f"recorded {recorded_after:.1f} s after the kill"

    row = _finished(orch, run_id)
    assert row["status"] == "error"
    assert "rank 1" in row["error_message"] and "SIGKILL" in row["error_message"], row["error_message"]
    streamed = [e["step"] for e in recorder.of_type("progress") if e.get("run_id") == run_id]
    assert streamed and [m["step"] for m in store.get_metrics(run_id)] == streamed
    assert wait_until(lambda: not alive([*ranks.values(), *torchrun]), timeout=5), "a rank or torchrun outlived the run"


def test_cancel_of_two_ranks_is_recorded_cancelled_and_leaves_no_rank(real_orchestrator, store, demo_assets):
    orch, recorder = real_orchestrator
    run_id = orch.start(two_rank_config(demo_assets, steps=400))
    _progress(recorder, run_id)
    ranks, torchrun = _processes_of(orch)
    output_dir = Path(store.get_run(run_id)["output_dir"])

    orch.stop(save=False, expected_run_id=run_id)
    row = _finished(orch, run_id)
    assert row["status"] == "stopped" and row["cancel_requested"], (row["status"], row["error_message"])
    assert row["error_message"].startswith("cancelled"), row["error_message"]
    assert not output_dir.exists()  # a cancel keeps nothing
    assert wait_until(lambda: not alive([*ranks.values(), *torchrun]), timeout=5), "a rank or torchrun outlived the run"


def test_a_cancel_right_after_the_start_ends_the_run_before_any_rank_starts(real_orchestrator, store, demo_assets):
    """The cancel reaches the worker while it is still importing, before the launcher
    listens for stops: it must still count (it was lost, and all 400 steps trained)."""
    orch, recorder = real_orchestrator
    run_id = orch.start(two_rank_config(demo_assets, steps=400))
    orch.stop(save=False, expected_run_id=run_id)
    row = _finished(orch, run_id)
    assert row["status"] == "stopped" and row["cancel_requested"], (row["status"], row["error_message"])
    assert row["final_step"] is None
    assert not [e for e in recorder.of_type("progress") if e.get("run_id") == run_id]
