"""The pure parts of the orchestrator: progress state merging, throttled progress log
lines, the outcome rules at finalize, and the partial-save clean-up on real folders."""

from __future__ import annotations

import logging
import math

from checkpoint_factory import make_checkpoint

from tunelab import events as ev
from tunelab import paths
from tunelab.orchestrator.cleanup import remove_partial_checkpoints
from tunelab.orchestrator.finalize import RunFacts, decide_outcome
from tunelab.orchestrator.progress_log import ProgressLog
from tunelab.orchestrator.state import ProgressState
from tunelab.orchestrator.watchdog import seconds_from_env


def _progress(step, **numbers):
    return ev.parse(ev.progress(step, **numbers))


def test_same_step_events_merge_and_new_steps_replace():
    state = ProgressState()
    state.apply_progress(_progress(10, loss=2.0, learning_rate=1e-4, total_steps=20))
    row = state.apply_progress(_progress(10, eval_loss=2.5))  # HF logs eval separately
    assert state.numbers["loss"] == 2.0 and state.numbers["eval_loss"] == 2.5
    assert row["loss"] is None and row["eval_loss"] == 2.5  # the store's upsert does the merging
    state.apply_progress(_progress(11, loss=math.nan))
    assert state.numbers["loss"] is None and state.numbers["eval_loss"] is None and state.step == 11
    assert state.history["steps"] == [10] and state.history["eval_steps"] == [10]
    assert state.phase == "training"


def test_extra_metrics_keep_their_own_steps_and_latest_values(monkeypatch):
    monkeypatch.setattr("tunelab.orchestrator.state.MAX_EXTRA_SERIES", 3)
    state = ProgressState()
    state.apply_progress(_progress(1, loss=2.0, extra={"mean_token_accuracy": 0.2, "entropy": 3.0}))
    state.apply_progress(_progress(2, loss=1.9, extra={"mean_token_accuracy": 0.3}))
    row = state.apply_progress(_progress(2, eval_loss=2.1, extra={"eval_mean_token_accuracy": 0.25, "one_too_many": 1.0}))
    assert row["extra"] == {"eval_mean_token_accuracy": 0.25, "one_too_many": 1.0}  # the store keeps every series
    extra = state.histories()["extra"]
    assert extra == {"mean_token_accuracy": {"steps": [1, 2], "values": [0.2, 0.3]}, "entropy": {"steps": [1], "values": [3.0]},
                     "eval_mean_token_accuracy": {"steps": [2], "values": [0.25]}}
    assert state.as_dict()["extra"] == {"mean_token_accuracy": 0.3, "entropy": 3.0, "eval_mean_token_accuracy": 0.25}


def test_progress_log_throttles_to_first_last_and_every_interval(caplog):
    now = [0.0]
    log = ProgressLog(run_id=7, interval_s=30, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="tunelab"):
        for step in range(1, 101):
            now[0] = step * 1.0  # one step per second
            log.step(_progress(step, loss=1.0, total_steps=100))
    logged = [int(r.getMessage().split()[3].split("/")[0]) for r in caplog.records]
    assert logged == [1, 31, 61, 91, 100]


def test_outcomes():
    base = dict(last_event=None, cancel_requested=False, save_requested=False, step=5, total_steps=10,
                output_dir=None, exitcode=-9)
    killed = decide_outcome(RunFacts(**base))
    assert (killed.status, killed.error, killed.resume_blocked) == ("error", "worker exited unexpectedly (exit code -9, SIGKILL)", False)
    done = decide_outcome(RunFacts(**{**base, "last_event": ev.parse(ev.complete("/x", "trained")), "exitcode": 0}))
    assert (done.status, done.message) == ("completed", "trained")
    cancelled = decide_outcome(RunFacts(**{**base, "cancel_requested": True, "save_requested": True,
                                           "last_event": ev.parse(ev.error("boom"))}))
    assert cancelled.status == "stopped" and not cancelled.keep_output_dir
    blocked = decide_outcome(RunFacts(**{**base, "last_event": ev.parse(ev.error("bad save", resume_blocked=True))}))
    assert (blocked.status, blocked.resume_blocked) == ("error", True)
    # A save asked for just as the last step finished: the run simply completed.
    late_save = decide_outcome(RunFacts(**{**base, "save_requested": True, "step": 10,
                                           "last_event": ev.parse(ev.complete("/x", "trained"))}))
    assert late_save.status == "completed"
    early_save = decide_outcome(RunFacts(**{**base, "save_requested": True, "step": None,
                                            "last_event": ev.parse(ev.complete(None, "stopped before training"))}))
    assert early_save.status == "stopped"
    failure = decide_outcome(RunFacts(**{**base, "failure": "model download stalled twice; check the network"}))
    assert failure.error == "model download stalled twice; check the network"


def test_save_outcome_checks_the_checkpoint_of_the_current_step(tmp_path):
    facts = dict(last_event=ev.parse(ev.complete(str(tmp_path), "stopped")), cancel_requested=False,
                 save_requested=True, step=6, total_steps=10, output_dir=str(tmp_path), exitcode=0)
    make_checkpoint(tmp_path, 4)  # an older checkpoint does not count
    missing = decide_outcome(RunFacts(**facts))
    assert (missing.status, missing.resume_blocked) == ("error", True)
    assert missing.error == "stop-and-save did not land a valid checkpoint of step 6"
    make_checkpoint(tmp_path, 6)
    assert decide_outcome(RunFacts(**facts)).status == "stopped"


def test_cleanup_only_inside_the_outputs_root(home, tmp_path):
    inside = paths.outputs_root() / "run"
    (inside / "tmp-checkpoint-3").mkdir(parents=True)
    make_checkpoint(inside, 2)
    outside = tmp_path / "elsewhere"
    (outside / "tmp-checkpoint-3").mkdir(parents=True)
    linked = paths.outputs_root() / "linked-run"
    linked.symlink_to(outside, target_is_directory=True)

    assert [p.name for p in remove_partial_checkpoints(inside)] == ["tmp-checkpoint-3"]
    assert (inside / "checkpoint-2").is_dir()
    assert remove_partial_checkpoints(outside) == []
    assert remove_partial_checkpoints(linked) == []
    assert (outside / "tmp-checkpoint-3").is_dir()


def test_watchdog_durations_from_the_environment(monkeypatch):
    monkeypatch.setenv("TUNELAB_STOP_GRACE_S", "2.5")
    assert seconds_from_env("TUNELAB_STOP_GRACE_S", 15) == 2.5
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv("TUNELAB_STOP_GRACE_S", bad)
        assert seconds_from_env("TUNELAB_STOP_GRACE_S", 15) == 15
