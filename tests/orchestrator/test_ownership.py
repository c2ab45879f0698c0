"""Run ownership and device locks (ownership.py): a run's owner is whoever holds its lock
file; a start on a device another run holds is refused, naming that run; start-up closes
only runs whose owner is gone. Real locks, real processes, a real SQLite file. (The same
through a real `tunelab train` and a real server: tests/reliability/test_preemption.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
import scripted_workers as sw
from orch_helpers import finished, scripted_config

from tunelab import paths
from tunelab.checkpoints import latest_valid_checkpoint
from tunelab.orchestrator import Orchestrator, RunActive
from tunelab.orchestrator.ownership import RunClaim, devices_of, owner_is_alive


def _close_orphans(store) -> list[int]:
    locks = paths.locks_dir(store.path)
    return store.close_orphans(latest_valid_checkpoint, lambda lock: owner_is_alive(locks, lock))


def test_devices_of_a_child_environment():
    assert devices_of({}) == ["cpu"]
    assert devices_of({"CUDA_VISIBLE_DEVICES": "3,1"}) == ["gpu-3", "gpu-1"]


def test_a_second_start_on_a_busy_device_is_refused_naming_the_run(store, monkeypatch):
    monkeypatch.setenv(sw.STEP_SECONDS_ENV, "0.2")
    first = Orchestrator(store, worker_target=sw.trainer)
    # Another orchestrator on the same home: what a second process (a server, a CLI) is.
    second = Orchestrator(store, worker_target=sw.trainer)
    try:
        run_id = first.start(scripted_config(max_steps=200))
        with pytest.raises(RunActive, match=rf"run {run_id} \(process {os.getpid()}\) is training on cpu"):
            second.start(scripted_config(queue=False))  # queue: true would wait in the queue instead
        assert store.count_runs() == 1, "a refused start must leave no row behind"
        row = store.get_run(run_id)
        assert row["owner_pid"] == os.getpid() and row["owner_lock"] and row["owner_started_at"] > 0
        assert owner_is_alive(paths.locks_dir(store.path), row["owner_lock"])

        first.stop(save=False)
        assert finished(first, run_id)["status"] == "stopped"
        assert not owner_is_alive(paths.locks_dir(store.path), row["owner_lock"])
        again = second.start(scripted_config())  # the device is free once the run is recorded
        assert finished(second, again)["status"] == "completed"
    finally:
        first.shutdown()
        second.shutdown()


def test_start_up_closes_only_runs_whose_owner_is_gone(store, monkeypatch):
    monkeypatch.setenv(sw.STEP_SECONDS_ENV, "0.2")
    locks = paths.locks_dir(store.path)
    # An owner that dies the hard way: its lock goes with it, whatever it was doing.
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from tunelab.orchestrator.ownership import RunClaim
        claim = RunClaim(Path({str(locks)!r}), ["gpu-7"])
        print(claim.owner_lock, flush=True)
        time.sleep(120)
    """)
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    dead_lock = holder.stdout.readline().strip()
    assert owner_is_alive(locks, dead_lock)
    with pytest.raises(RunActive, match="gpu-7"):
        RunClaim(locks, ["gpu-7"])
    dead = store.create_run({"model_name": "m"}, "m", "d", owner={"lock": dead_lock, "pid": holder.pid})
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    legacy = store.create_run({"model_name": "m"}, "m", "d")  # a row from before owners were recorded

    orch = Orchestrator(store, worker_target=sw.trainer)
    try:
        live = orch.start(scripted_config(max_steps=200))
        assert sorted(_close_orphans(store)) == [dead, legacy]
        assert store.get_run(live)["status"] == "running"
        orch.stop(save=True)
        row = finished(orch, live)
        # The live run's own finalize was not overtaken by the start-up clean-up.
        assert row["status"] == "stopped" and row["error_message"] is None
    finally:
        orch.shutdown()
    RunClaim(locks, ["gpu-7"]).release()  # the dead holder's device is free again
