"""A run from start to finalize through real spawn children: state, histories, stored
metrics, malformed input, workers that crash or die, refusals while a run is active."""

from __future__ import annotations

import gc
import json
import multiprocessing.spawn
import os
import resource
import subprocess
import sys
import threading
import time

import pytest
import scripted_workers as sw
from orch_helpers import EventRecorder, finished, scripted_config

from tunelab.orchestrator import NoActiveRun, Orchestrator, RunActive
from tunelab.orchestrator.errors import PersistError


def test_normal_run_records_state_histories_metrics_and_one_final_event(orchestrator_for, store):
    orch, recorder = orchestrator_for(sw.trainer)
    cfg = scripted_config(max_steps=6, hf_token="hf_secretsecretsecret", display_name="first run")
    run_id = orch.start(cfg)
    row = finished(orch, run_id)

    assert row["status"] == "completed"
    assert (row["final_step"], row["total_steps"]) == (6, 6)
    assert row["final_loss"] == pytest.approx(5.0 / 6)
    assert row["loss_sparkline"] == pytest.approx([5.0 / s for s in range(1, 7)])
    assert row["output_dir"] and row["error_message"] is None
    assert "hf_secretsecretsecret" not in json.dumps(row)  # the stored config is the sanitized one
    assert [m["step"] for m in store.get_metrics(run_id)] == [1, 2, 3, 4, 5, 6]

    snap = orch.snapshot()
    assert (snap["phase"], snap["run_id"], snap["is_training_running"]) == ("completed", run_id, False)
    assert snap["histories"]["steps"] == [1, 2, 3, 4, 5, 6]
    assert snap["histories"]["loss"] == pytest.approx([5.0 / s for s in range(1, 7)])
    assert orch.metrics() == snap["histories"]
    assert [e["step"] for e in orch.progress_since(4)] == [5, 6]

    finals = recorder.finals()
    assert len(finals) == 1 and finals[0]["type"] == "complete" and finals[0]["status"] == "completed"
    assert all(e["run_id"] == run_id for e in recorder.events)
    # The worker's own `complete` is replaced by the final one, so a stream ends once.
    assert len(recorder.of_type("complete")) == 1
    assert not orch.is_training_active()


def test_non_finite_values_are_null_and_left_out_of_histories(orchestrator_for, store):
    orch, _ = orchestrator_for(sw.nan_losses)
    run_id = orch.start(scripted_config(max_steps=6))
    row = finished(orch, run_id)

    assert row["status"] == "completed"
    history = orch.metrics()
    assert history["steps"] == [1, 3, 5]  # even steps had a NaN loss
    assert history["loss"] == pytest.approx([1.0, 1 / 3, 1 / 5])
    assert history["learning_rate"] == [1e-3, None, 1e-3]  # inf at step 3, aligned with its loss
    assert history["grad_norm_steps"] == [1, 2, 4, 5]  # -inf at steps 3 and 6
    snap = orch.snapshot()
    assert snap["loss"] is None and snap["grad_norm"] is None  # the last step's NaN, not an older value
    stored = {m["step"]: m for m in store.get_metrics(run_id)}
    assert stored[2]["loss"] is None and stored[3]["learning_rate"] is None and stored[5]["loss"] == pytest.approx(0.2)
    assert row["loss_sparkline"] == pytest.approx([1.0, 1 / 3, 1 / 5])


def test_a_thousand_malformed_events_are_skipped_and_counted(orchestrator_for, store):
    orch, recorder = orchestrator_for(sw.malformed_flood)
    run_id = orch.start(scripted_config(max_steps=10))
    row = finished(orch, run_id)

    assert row["status"] == "completed"
    assert orch.snapshot()["malformed_events"] == 1000
    assert [m["step"] for m in store.get_metrics(run_id)] == list(range(1, 11))
    assert [e["step"] for e in recorder.of_type("progress")] == list(range(1, 11))


def test_worker_killed_mid_run_is_an_error_with_every_received_metric(orchestrator_for, store):
    orch, recorder = orchestrator_for(sw.killed_mid_run)
    run_id = orch.start(scripted_config(max_steps=23))
    row = finished(orch, run_id)

    assert row["status"] == "error"
    assert row["error_message"] == "worker exited unexpectedly (exit code -9, SIGKILL)"
    received = [e["step"] for e in recorder.of_type("progress")]
    assert received == list(range(1, 24))
    assert [m["step"] for m in store.get_metrics(run_id)] == received
    assert row["final_step"] == 23 and not row["resume_blocked"]
    assert recorder.finals()[0]["type"] == "error"


def test_worker_failing_before_any_event_still_leaves_a_history_row(orchestrator_for, store):
    orch, _ = orchestrator_for(sw.crashes_at_start)
    run_id = orch.start(scripted_config())
    row = finished(orch, run_id)
    assert row["status"] == "error"
    assert row["error_message"] == "worker exited unexpectedly (exit code 1)"
    assert store.count_runs() == 1


def test_worker_error_event_is_stored(orchestrator_for):
    orch, recorder = orchestrator_for(sw.reports_error)
    run_id = orch.start(scripted_config())
    row = finished(orch, run_id)
    assert row["status"] == "error" and row["error_message"] == "CUDA out of memory (pretend)"
    assert recorder.finals()[0]["error"] == "CUDA out of memory (pretend)"
    assert orch.snapshot()["error"] == "CUDA out of memory (pretend)"


def test_unimportable_worker_reports_an_error(orchestrator_for):
    orch, _ = orchestrator_for("scripted_workers:no_such_function")
    run_id = orch.start(scripted_config())
    row = finished(orch, run_id)
    assert row["status"] == "error"
    assert "scripted_workers:no_such_function could not be loaded" in row["error_message"]


def test_start_is_refused_while_a_run_is_active_and_reset_needs_a_finished_run(orchestrator_for, monkeypatch, tmp_path):
    release = tmp_path / "release"
    monkeypatch.setenv("SCRIPTED_RELEASE_FILE", str(release))
    orch, recorder = orchestrator_for(sw.waits_for_file)
    run_id = orch.start(scripted_config())
    recorder.wait_for(lambda e: e["type"] == "progress")
    assert orch.is_training_active()
    with pytest.raises(RunActive):
        orch.start(scripted_config(queue=False))  # queue: true would wait in the queue instead
    with pytest.raises(RunActive):
        orch.reset()
    release.touch()
    assert finished(orch, run_id)["status"] == "completed"
    orch.reset()
    snap = orch.snapshot()
    assert (snap["phase"], snap["run_id"], snap["histories"]["steps"]) == ("idle", None, [])
    with pytest.raises(NoActiveRun):
        orch.stop(save=True)
    second = orch.start(scripted_config())
    assert second != run_id and finished(orch, second)["status"] == "completed"


def test_same_start_request_id_gives_the_same_run(orchestrator_for, store):
    orch, _ = orchestrator_for(sw.trainer)
    first = orch.start(scripted_config(), start_request_id="req-1")
    again = orch.start(scripted_config(), start_request_id="req-1")
    assert again == first
    finished(orch, first)
    assert orch.start(scripted_config(), start_request_id="req-1") == first  # found in the store
    assert store.count_runs() == 1


def _free_fds(count: int) -> list[int]:
    """The `count` lowest file descriptor numbers not in use (new files get these first)."""
    # Earlier tests' finished runs (orchestrator <-> run cycles) hold their queues' pipes until
    # the cycle collector runs; collect now so it cannot free descriptors after the count.
    gc.collect()
    used = {int(name) for name in os.listdir("/proc/self/fd")}
    return [fd for fd in range(len(used) + count + 1) if fd not in used][:count]


ALONE_ENV = "TUNELAB_TEST_FD_LIMIT_ALONE"


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to count open files")
def test_failed_spawn_finalizes_the_row_and_latches_nothing(tmp_path):
    # The descriptor count below holds only in a process whose descriptors nothing else
    # takes meanwhile; in the suite, earlier tests leave threads (accept loops, a telemetry
    # sender) that did take the spares in every try, twice in a row. So the test runs in a
    # fresh pytest process of its own, with only its own fixtures.
    node = f"{__file__}::test_failed_spawn_in_a_process_of_its_own"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node,
                           "--basetemp", str(tmp_path / "alone")],
                          env={**os.environ, ALONE_ENV: "1"}, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.mark.skipif(os.environ.get(ALONE_ENV) != "1",
                    reason="run in a process of its own by test_failed_spawn_finalizes_the_row_and_latches_nothing")
def test_failed_spawn_in_a_process_of_its_own(orchestrator_for, store):
    orch, recorder = orchestrator_for(sw.trainer)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # With (almost) no file descriptor left, the worker's queues and process cannot be
    # created; the two lock files the run holds (its device and its owner lock) are opened
    # first. One spare: a thread left by an earlier test may hold a descriptor for a
    # moment, and a queue's pipe needs two anyway.
    # A thread of an earlier test that takes a descriptor between the count and the start can
    # leave none for the lock files: that start is refused before anything exists (checked),
    # and the test tries again, after a pause, with one spare more every second try (a queue
    # and a process need many more than the few spares, so the spawn still cannot happen).
    # The pauses grow, so a burst of another thread's descriptors is waited out.
    refusals = []
    for attempt, spare in enumerate((3, 3, 4, 4, 5, 5, 5, 5)):
        if attempt:
            time.sleep(0.2 * attempt)
        resource.setrlimit(resource.RLIMIT_NOFILE, (_free_fds(spare)[-1] + 1, hard))
        try:
            run_id = orch.start(scripted_config())
            break
        except PersistError as refused:
            assert "Too many open files" in str(refused) and store.count_runs() == 0
            assert not orch.is_training_active()
            refusals.append(str(refused))
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    else:
        # Name who else was in the process, so that a failure says which thread took them.
        threads = sorted(thread.name for thread in threading.enumerate())
        pytest.fail(f"the lock files never got their descriptors in {len(refusals)} tries; last refusal: "
                    f"{refusals[-1]}; threads alive: {threads}")
    row = store.get_run(run_id)
    assert row["status"] == "error" and row["error_message"].startswith("could not start the worker process")
    assert not orch.is_training_active()
    assert recorder.finals()[0]["status"] == "error"
    second = orch.start(scripted_config())
    assert finished(orch, second)["status"] == "completed"


def test_worker_whose_interpreter_cannot_run_ends_as_an_error(orchestrator_for, monkeypatch):
    orch, _ = orchestrator_for(sw.trainer)
    monkeypatch.setattr(multiprocessing.spawn, "_python_exe", os.fsencode("/nonexistent/python3"))
    run_id = orch.start(scripted_config())
    row = finished(orch, run_id)
    assert row["status"] == "error" and row["error_message"].startswith("worker exited unexpectedly (exit code")
    assert not orch.is_training_active()


def test_before_spawn_hook_failure_does_not_block_the_start(orchestrator_for):
    calls = []

    def hook():
        calls.append("called")
        raise RuntimeError("could not free GPU memory")

    orch, _ = orchestrator_for(sw.trainer, before_spawn=hook)
    run_id = orch.start(scripted_config())
    assert finished(orch, run_id)["status"] == "completed"
    assert calls == ["called"]


class PumpKiller(BaseException):
    """Escapes the pump's error handling, so the pump thread really dies."""


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the death is the point
def test_a_dead_pump_is_restarted_by_a_status_poll(orchestrator_for, store, monkeypatch, tmp_path):
    release = tmp_path / "release"
    monkeypatch.setenv("SCRIPTED_RELEASE_FILE", str(release))
    orch, recorder = orchestrator_for(sw.waits_for_file)
    killed = []

    def kill_pump_once(event):
        if event["type"] == "progress" and not killed:
            killed.append(event["step"])
            raise PumpKiller()

    orch.subscribe(kill_pump_once)
    run_id = orch.start(scripted_config())
    recorder.wait_for(lambda e: e["type"] == "progress")
    pump = orch._runs[run_id].pump_thread()
    pump.join(30)
    assert not pump.is_alive() and killed == [1]
    release.touch()
    snap = orch.snapshot()  # the poll that revives the pump
    assert snap["is_training_running"]
    row = finished(orch, run_id)
    assert row["status"] == "completed"
    assert [m["step"] for m in store.get_metrics(run_id)] == [1, 2]


def test_loss_plot_for_no_run_and_for_the_last_run(orchestrator_for):
    orch, _ = orchestrator_for(sw.trainer)
    empty = orch.plot_png()
    assert empty.startswith(b"\x89PNG\r\n\x1a\n")
    run_id = orch.start(scripted_config(max_steps=8))
    finished(orch, run_id)
    light, dark = orch.plot_png("light"), orch.plot_png("dark")
    assert light.startswith(b"\x89PNG") and dark.startswith(b"\x89PNG")
    assert len({empty, light, dark}) == 3
    with pytest.raises(ValueError, match="theme"):
        orch.plot_png("sepia")


def test_shutdown_ends_the_worker_and_records_an_error(store, monkeypatch):
    monkeypatch.setenv(sw.STEP_SECONDS_ENV, "0.05")
    orch = Orchestrator(store, worker_target=sw.trainer)
    recorder = EventRecorder()
    orch.subscribe(recorder)
    run_id = orch.start(scripted_config(max_steps=1000))
    recorder.wait_for(lambda e: e["type"] == "progress")
    orch.shutdown()
    row = store.get_run(run_id)
    assert row["status"] == "error" and row["error_message"] == "tunelab shut down during training"
    assert not orch.is_training_active()
    with pytest.raises(RunActive, match="shutting down"):
        orch.start(scripted_config())


def test_shutdown_after_the_worker_completed_with_a_valid_save_is_completed(store):
    """The worker said `complete` (naming its valid final checkpoint) but has not exited
    when the server shuts down: what it finished stands."""
    orch = Orchestrator(store, worker_target=sw.hangs_after_complete)
    run_id = orch.start(scripted_config(max_steps=3))
    deadline = time.monotonic() + 60
    while orch.snapshot()["phase"] != "finalizing" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert orch.snapshot()["phase"] == "finalizing"
    orch.shutdown()
    row = store.get_run(run_id)
    assert row["status"] == "completed" and row["error_message"] is None
    assert row["final_step"] == 3


def test_a_finished_run_deleted_from_the_history_is_gone_from_the_per_run_status(orchestrator_for):
    # Found by the API fuzzer: GET /api/runs/{id}/status answered 200 for a deleted run,
    # from the state the orchestrator still held; /api/train/status keeps the last run.
    from tunelab.store import RunNotFound

    orch, _recorder = orchestrator_for(sw.reports_environment)
    run_id = orch.start(scripted_config())
    assert finished(orch, run_id)["status"] == "completed"
    assert orch.run_snapshot(run_id)["run_id"] == run_id
    orch.store.delete_run(run_id)
    with pytest.raises(RunNotFound):
        orch.run_snapshot(run_id)
    with pytest.raises(RunNotFound):
        orch.view(run_id)
    assert orch.snapshot()["run_id"] == run_id
