"""The prewarmed worker: one real spawned child with its imports done, waiting for a job.

Most tests preload the tiny `warm_marker` module instead of torch & co, so a warm child
is ready in a moment; `reports_identity` tells whether the run's process had it imported
before the job arrived. One slow test preloads the real libraries and trains the demo
model, to show a warm run learns exactly what a cold run learns.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import scripted_workers as sw
from orch_helpers import EventRecorder, finished, scripted_config

from tunelab.demos.text import demo_config
from tunelab.orchestrator import Orchestrator
from tunelab.orchestrator.prewarm import PREWARM_ENV, prewarm_wanted

MARKER = ["warm_marker"]
WAIT_S = 120
HERE = Path(__file__).resolve().parent


def wait_until(predicate, what: str, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout} s")


def ready_pid(orch: Orchestrator, not_pid: int | None = None) -> int:
    """The pid of a warm child whose imports are done (and that is not `not_pid`)."""

    def check():
        status = orch.prewarm_status()
        return status["pid"] if status["ready"] and status["pid"] != not_pid else None

    return wait_until(check, "a ready prewarmed worker")


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def identity(recorder: EventRecorder, run_id: int) -> dict:
    event = recorder.wait_for(lambda e: e["type"] == "status" and e["run_id"] == run_id
                              and e["message"].startswith("identity "))
    return json.loads(event["message"].removeprefix("identity "))


def test_each_run_takes_a_fresh_prewarmed_child(orchestrator_for):
    orch, recorder = orchestrator_for("warm_workers:reports_identity", prewarm=MARKER)
    first_warm = ready_pid(orch)

    first = orch.start(scripted_config())
    seen = identity(recorder, first)
    assert seen == {"pid": first_warm, "preloaded": True, "marker": None}
    assert finished(orch, first)["status"] == "completed"

    second_warm = ready_pid(orch, not_pid=first_warm)  # a new child, started after the run ended
    second = orch.start(scripted_config())
    assert identity(recorder, second)["pid"] == second_warm != first_warm
    assert finished(orch, second)["status"] == "completed"
    assert gone(first_warm) and gone(second_warm)  # a run's process is never reused


def test_a_job_handed_over_while_the_child_still_imports_waits_for_it(orchestrator_for, monkeypatch):
    monkeypatch.setenv("WARM_MARKER_SLEEP_S", "1.5")
    orch, recorder = orchestrator_for("warm_workers:reports_identity", prewarm=MARKER)
    warm = wait_until(lambda: orch.prewarm_status()["pid"], "a prewarmed worker to start")
    run_id = orch.start(scripted_config())  # no waiting for "ready"
    assert identity(recorder, run_id) == {"pid": warm, "preloaded": True, "marker": None}
    assert finished(orch, run_id)["status"] == "completed"


def test_a_changed_parent_environment_gets_a_cold_worker_and_a_new_warm_one(orchestrator_for, monkeypatch):
    monkeypatch.delenv("SCRIPTED_MARKER", raising=False)
    orch, recorder = orchestrator_for("warm_workers:reports_identity", prewarm=MARKER)
    stale = ready_pid(orch)
    monkeypatch.setenv("SCRIPTED_MARKER", "set after the warm child started")

    run_id = orch.start(scripted_config())
    seen = identity(recorder, run_id)
    assert seen["marker"] == "set after the warm child started"  # the run sees today's environment
    assert seen["pid"] != stale and seen["preloaded"] is False
    assert finished(orch, run_id)["status"] == "completed"

    fresh = ready_pid(orch, not_pid=stale)
    assert fresh != stale and wait_until(lambda: gone(stale), "the stale warm child to end")


def test_a_dead_warm_child_means_a_cold_start(orchestrator_for):
    orch, recorder = orchestrator_for("warm_workers:reports_identity", prewarm=MARKER)
    warm = ready_pid(orch)
    os.kill(warm, signal.SIGKILL)
    wait_until(lambda: gone(warm), "the killed warm child to die")

    run_id = orch.start(scripted_config())
    assert identity(recorder, run_id)["pid"] != warm
    assert finished(orch, run_id)["status"] == "completed"


def test_the_stall_retry_is_a_cold_spawn_with_xet_disabled(orchestrator_for, store, monkeypatch):
    monkeypatch.delenv("HF_HUB_DISABLE_XET", raising=False)
    orch, recorder = orchestrator_for(sw.stalls_unless_xet_disabled, prewarm=MARKER)
    warm = ready_pid(orch)
    run_id = orch.start(scripted_config())
    assert orch.snapshot()["worker_pid"] == warm  # the first try went to the warm child
    row = finished(orch, run_id)
    assert row["status"] == "completed"
    assert [m["step"] for m in store.get_metrics(run_id)] == [1, 2]
    assert recorder.wait_for(lambda e: e["type"] == "status" and "HF_HUB_DISABLE_XET=1" in e["message"])
    assert gone(warm) and "HF_HUB_DISABLE_XET" not in os.environ


def test_shutdown_ends_the_waiting_child(store):
    orch = Orchestrator(store, worker_target="warm_workers:reports_identity", prewarm=MARKER)
    warm = ready_pid(orch)
    orch.shutdown()
    assert gone(warm)
    assert orch.prewarm_status() == {"enabled": True, "pid": None, "ready": False}


def test_prewarm_later_waits_for_start_prewarm(store):
    orch = Orchestrator(store, worker_target="warm_workers:reports_identity", prewarm=MARKER, prewarm_later=True)
    try:
        assert orch.prewarm_status() == {"enabled": True, "pid": None, "ready": False}  # nothing spawned yet
        orch.start_prewarm()
        warm = ready_pid(orch)
    finally:
        orch.shutdown()
    assert gone(warm)


PARENT_SCRIPT = textwrap.dedent("""
    import sys, time
    from tunelab import paths
    from tunelab.orchestrator import Orchestrator
    from tunelab.store import Store

    if __name__ == "__main__":
        orchestrator = Orchestrator(Store(paths.db_path()), prewarm=["warm_marker"])
        while not orchestrator.prewarm_status()["ready"]:
            time.sleep(0.05)
        print(orchestrator.prewarm_status()["pid"], flush=True)
        time.sleep(600)
""")


def test_the_warm_child_exits_when_its_parent_dies(home, tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        warm = int(parent.stdout.readline())
        assert psutil.Process(warm).ppid() == parent.pid
    finally:
        parent.kill()
        parent.wait()
    wait_until(lambda: gone(warm), "the orphaned warm child to exit")


def test_prewarm_setting_from_the_environment(store, monkeypatch):
    monkeypatch.setenv(PREWARM_ENV, "0")
    assert prewarm_wanted(default=True) is False
    assert Orchestrator(store).prewarm_status()["enabled"] is False
    monkeypatch.setenv(PREWARM_ENV, "yes")
    assert prewarm_wanted(default=False) is True
    monkeypatch.setenv(PREWARM_ENV, "sometimes")
    assert prewarm_wanted(default=True) is True and prewarm_wanted(default=False) is False
    monkeypatch.delenv(PREWARM_ENV)
    assert Orchestrator(store).prewarm_status()["enabled"] is False  # off unless asked for


@pytest.mark.slow
def test_a_prewarmed_real_worker_trains_exactly_like_a_cold_one(demo_assets, store):
    cfg = demo_config(demo_assets, steps=4)
    losses = {}
    for prewarm in (True, False):
        orch = Orchestrator(store, prewarm=prewarm)
        try:
            warm = ready_pid(orch) if prewarm else None
            run_id = orch.start(cfg)
            if prewarm:
                assert orch.snapshot()["worker_pid"] == warm
            row = finished(orch, run_id)
            assert row["status"] == "completed", row["error_message"]
            losses[prewarm] = [m["loss"] for m in store.get_metrics(run_id)]
        finally:
            orch.shutdown()
    assert len(losses[True]) == 4
    assert losses[True] == losses[False]
