"""Stop-and-save, cancel and its clean-up, the stop watchdog and finalize-once, with real
worker processes that behave — or refuse to."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import psutil
import pytest
import scripted_workers as sw
from orch_helpers import EventRecorder, finished, scripted_config

from tunelab import paths
from tunelab.checkpoints import validate_checkpoint
from tunelab.orchestrator import NoActiveRun, NotResumable, Orchestrator, PersistError, RunMismatch
from tunelab.orchestrator.finalize import FinalizeOnce
from tunelab.store import Store


@pytest.fixture
def slow_steps(monkeypatch):
    """Steps slow enough that a test can act in the middle of a run."""
    monkeypatch.setenv(sw.STEP_SECONDS_ENV, "0.05")


def _start_and_reach(orch, recorder, cfg, step: int) -> int:
    run_id = orch.start(cfg)
    recorder.wait_for(lambda e: e["type"] == "progress" and e["step"] >= step)
    return run_id


def _worker_gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_stop_and_save_with_a_valid_checkpoint_is_stopped(orchestrator_for, slow_steps):
    orch, recorder = orchestrator_for(sw.trainer)
    run_id = _start_and_reach(orch, recorder, scripted_config(max_steps=1000), 3)
    orch.stop(save=True, expected_run_id=run_id)
    row = finished(orch, run_id)

    assert row["status"] == "stopped" and not row["resume_blocked"] and row["error_message"] is None
    step = row["final_step"]
    assert validate_checkpoint(Path(row["output_dir"]) / f"checkpoint-{step}").step == step
    assert recorder.finals()[0]["status"] == "stopped"


def test_stop_and_save_between_logged_steps_is_stopped_at_the_saved_step(orchestrator_for, slow_steps):
    """The worker logs every 5 steps, so the parent's last step lags the step saved: the
    checkpoint named by the worker's `complete` is the one checked and recorded."""
    orch, recorder = orchestrator_for(sw.trainer)
    run_id = _start_and_reach(orch, recorder, scripted_config(max_steps=1000, logging_steps=5), 5)
    orch.stop(save=True, expected_run_id=run_id)
    row = finished(orch, run_id)

    assert row["status"] == "stopped", row["error_message"]
    step = row["final_step"]
    assert step > max(e["step"] for e in recorder.of_type("progress"))
    assert validate_checkpoint(Path(row["output_dir"]) / f"checkpoint-{step}").step == step
    assert recorder.finals()[0]["final_step"] == step


def test_stop_and_save_without_a_checkpoint_is_an_error_that_blocks_resume(orchestrator_for, slow_steps):
    orch, recorder = orchestrator_for(sw.forgets_to_save)
    run_id = _start_and_reach(orch, recorder, scripted_config(max_steps=1000), 2)
    orch.stop(save=True)
    row = finished(orch, run_id)

    assert row["status"] == "error" and row["resume_blocked"]
    assert row["error_message"] == f"stop-and-save did not land a valid checkpoint of step {row['final_step']}"
    with pytest.raises(NotResumable, match="cannot be trusted"):
        orch.resume(run_id)


def test_cancel_removes_the_run_folder_and_never_follows_links(orchestrator_for, slow_steps, tmp_path):
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "precious.txt").write_text("must survive")
    orch, recorder = orchestrator_for(sw.trainer)
    run_id = _start_and_reach(orch, recorder, scripted_config(max_steps=1000, save_steps=2), 5)
    output_dir = Path(orch.snapshot()["output_dir"])
    (output_dir / "linked").symlink_to(canary, target_is_directory=True)

    orch.stop(save=False, expected_run_id=run_id)
    row = finished(orch, run_id)

    assert row["status"] == "stopped" and row["cancel_requested"]
    assert row["output_dir"] is None  # nothing to resume or export
    assert not output_dir.exists()  # checkpoints and partial saves alike: a cancel keeps nothing
    assert row["error_message"] == f"cancelled; its folder {output_dir} was removed"
    assert (canary / "precious.txt").read_text() == "must survive"
    with pytest.raises(NotResumable, match="cancelled"):
        orch.resume(run_id)


def test_cancel_keeps_a_folder_another_run_shares_but_removes_its_partial_saves(orchestrator_for, slow_steps, tmp_path):
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "precious.txt").write_text("must survive")
    orch, recorder = orchestrator_for(sw.trainer)
    first = _start_and_reach(orch, recorder, scripted_config(max_steps=1000, save_steps=2), 2)
    orch.stop(save=True)
    output_dir = Path(finished(orch, first)["output_dir"])
    second = orch.resume(first)  # continues in the same folder
    recorder.wait_for(lambda e: e["type"] == "progress" and e["run_id"] == second and e["step"] >= 5)
    (output_dir / "tmp-checkpoint-999").symlink_to(canary, target_is_directory=True)
    partial_with_link = output_dir / "tmp-checkpoint-998"
    partial_with_link.mkdir()
    (partial_with_link / "escape").symlink_to(canary, target_is_directory=True)

    orch.stop(save=False, expected_run_id=second)
    row = finished(orch, second)

    assert row["status"] == "stopped" and row["output_dir"] is None
    assert row["error_message"] == f"cancelled; its folder {output_dir} is shared with run(s) {first}, so it was kept (partial saves removed)"
    left = sorted(p.name for p in output_dir.iterdir())
    assert not any(name.startswith("tmp-checkpoint-") and name != "tmp-checkpoint-999" for name in left)
    assert (output_dir / "tmp-checkpoint-999").is_symlink()  # a link is not removed, let alone followed
    assert (canary / "precious.txt").read_text() == "must survive"
    assert {"checkpoint-2", "checkpoint-4"} <= set(left)


def test_cancel_leaves_a_folder_outside_the_outputs_root_and_says_so(orchestrator_for, slow_steps, tmp_path):
    outside = tmp_path / "elsewhere"
    orch, recorder = orchestrator_for(sw.trainer)
    run_id = _start_and_reach(orch, recorder, scripted_config(max_steps=1000, save_steps=2, output_dir=str(outside),
                                                              allow_output_outside_root=True), 3)
    orch.stop(save=False, expected_run_id=run_id)
    row = finished(orch, run_id)
    assert row["status"] == "stopped" and "outside the outputs root, so it was left on disk" in row["error_message"]
    assert (outside / "checkpoint-2").is_dir()  # tunelab deletes nothing outside the outputs root


def test_cancel_is_never_undone_by_a_later_save(orchestrator_for, slow_steps):
    orch, recorder = orchestrator_for(sw.trainer)
    run_id = _start_and_reach(orch, recorder, scripted_config(max_steps=1000), 2)
    orch.stop(save=False)
    orch.stop(save=True)
    row = finished(orch, run_id)
    assert row["status"] == "stopped" and row["output_dir"] is None


def test_cancel_that_cannot_be_recorded_fails_loudly_and_does_not_signal(home, tmp_path, monkeypatch):
    release = tmp_path / "release"
    monkeypatch.setenv("SCRIPTED_RELEASE_FILE", str(release))
    store = Store(paths.db_path(), retry_seconds=0.3)
    orch = Orchestrator(store, worker_target=sw.waits_for_file)
    recorder = EventRecorder()
    orch.subscribe(recorder)
    try:
        run_id = _start_and_reach(orch, recorder, scripted_config(), 1)
        blocker = sqlite3.connect(paths.db_path(), isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")
        try:
            with pytest.raises(PersistError):
                orch.stop(save=False)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        release.touch()
        row = finished(orch, run_id)
        assert row["status"] == "completed" and not row["cancel_requested"]
        assert [m["step"] for m in store.get_metrics(run_id)] == [1, 2]
    finally:
        orch.shutdown()
        store.close()


def test_stop_checks_the_run_it_is_meant_for(orchestrator_for, slow_steps):
    orch, recorder = orchestrator_for(sw.trainer)
    with pytest.raises(NoActiveRun):
        orch.stop(save=True)
    run_id = _start_and_reach(orch, recorder, scripted_config(max_steps=1000), 1)
    with pytest.raises(RunMismatch):
        orch.stop(save=True, expected_run_id=run_id + 1)
    orch.stop(save=False, expected_run_id=run_id)
    finished(orch, run_id)
    with pytest.raises(NoActiveRun):
        orch.stop(save=False, expected_run_id=run_id)


def test_watchdog_kills_a_worker_that_ignores_a_cancel(orchestrator_for, monkeypatch):
    monkeypatch.setenv("TUNELAB_STOP_CANCEL_CAP_S", "0.5")
    orch, recorder = orchestrator_for(sw.ignores_stop)
    run_id = _start_and_reach(orch, recorder, scripted_config(), 3)
    pid = orch.snapshot()["worker_pid"]
    orch.stop(save=False)
    row = finished(orch, run_id)
    assert row["status"] == "stopped" and row["cancel_requested"]
    assert _worker_gone(pid)
    assert len(recorder.finals()) == 1


def test_watchdog_kills_a_worker_that_ignores_a_save_and_the_save_did_not_land(orchestrator_for, monkeypatch):
    monkeypatch.setenv("TUNELAB_STOP_SAVE_CAP_S", "0.5")
    orch, recorder = orchestrator_for(sw.ignores_stop)
    run_id = _start_and_reach(orch, recorder, scripted_config(), 3)
    orch.stop(save=True)
    row = finished(orch, run_id)
    assert row["status"] == "error" and row["resume_blocked"]
    assert row["error_message"] == f"stop-and-save did not land a valid checkpoint of step {row['final_step']}"


def test_a_later_cancel_tightens_a_pending_save_to_the_cancel_cap(orchestrator_for, monkeypatch):
    monkeypatch.setenv("TUNELAB_STOP_SAVE_CAP_S", "600")
    monkeypatch.setenv("TUNELAB_STOP_CANCEL_CAP_S", "0.5")
    orch, recorder = orchestrator_for(sw.ignores_stop)
    run_id = _start_and_reach(orch, recorder, scripted_config(), 2)
    orch.stop(save=True)
    orch.stop(save=False)
    row = finished(orch, run_id)  # well before the 600 s save cap
    assert row["status"] == "stopped" and row["cancel_requested"]


def test_worker_hanging_after_complete_is_killed_and_finalized_once(orchestrator_for, store, monkeypatch):
    monkeypatch.setenv("TUNELAB_STOP_GRACE_S", "0.3")
    orch, recorder = orchestrator_for(sw.hangs_after_complete)
    run_id = orch.start(scripted_config(max_steps=4))
    row = finished(orch, run_id)
    assert row["status"] == "completed" and row["final_step"] == 4
    assert _worker_gone(orch.snapshot()["worker_pid"])
    assert len(recorder.finals()) == 1
    assert [m["step"] for m in store.get_metrics(run_id)] == [1, 2, 3, 4]


def test_finalize_runs_once_when_pump_watchdog_and_others_race(orchestrator_for, tmp_path, monkeypatch):
    monkeypatch.setenv("SCRIPTED_RELEASE_FILE", str(tmp_path / "never"))
    orch, recorder = orchestrator_for(sw.waits_for_file)
    run_id = _start_and_reach(orch, recorder, scripted_config(), 1)
    run = orch._runs[run_id]
    barrier = threading.Barrier(8)
    results: list[object] = []

    def racer(i: int) -> None:
        barrier.wait()
        results.append(run.force_end("race") if i % 2 else run.finish())

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    row = finished(orch, run_id)
    assert row["status"] == "error"
    assert len(recorder.finals()) == 1
    assert [r for r in results if r is True] in ([], [True])  # the pump may have won instead


def test_finalize_once_guard_under_contention():
    guard = FinalizeOnce()
    barrier = threading.Barrier(16)
    ran, returned = [], []

    def contender() -> None:
        barrier.wait()
        returned.append(guard.run(lambda: ran.append(threading.get_ident())))

    threads = [threading.Thread(target=contender) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(ran) == 1 and returned.count(True) == 1 and guard.done.is_set()


def test_a_finished_runs_watchdog_never_touches_the_next_run(orchestrator_for, monkeypatch, tmp_path, slow_steps):
    monkeypatch.setenv("TUNELAB_STOP_SAVE_CAP_S", "0.5")
    orch, recorder = orchestrator_for(sw.trainer)
    first = _start_and_reach(orch, recorder, scripted_config(max_steps=1000), 1)
    orch.stop(save=True)
    assert finished(orch, first)["status"] == "stopped"

    release = tmp_path / "release"
    monkeypatch.setenv("SCRIPTED_RELEASE_FILE", str(release))
    second = orch.start(scripted_config(max_steps=2))  # trains 2 steps, then waits for the file
    recorder.wait_for(lambda e: e["type"] == "progress" and e["run_id"] == second)
    pid = orch.snapshot()["worker_pid"]
    threading.Event().wait(1.5)  # well past the first run's save cap
    assert psutil.pid_exists(pid) and orch.is_training_active()
    release.touch()
    assert finished(orch, second)["status"] == "completed"
