"""The run queue end to end on a fake 2-GPU machine (a fake `nvidia-smi` on PATH) while
the runs themselves are scripted CPU workers: runs wait for busy devices, train at once
on disjoint ones, survive a restart while queued, and end in their right states."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import scripted_workers as sw
from orch_helpers import WAIT_S, EventRecorder, scripted_config

from tunelab import hardware, paths
from tunelab.orchestrator import Orchestrator, RunActive
from tunelab.store import Store

FAKE_NVIDIA_SMI = """#!/bin/sh
# index, uuid, memory.total, memory.free, name: what tunelab asks for
echo "0, GPU-fake-0, 81920, 80000, Fake H100"
echo "1, GPU-fake-1, 81920, 79000, Fake H100"
"""


@pytest.fixture
def two_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "nvidia-smi"
    fake.write_text(FAKE_NVIDIA_SMI)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [g.pin for g in hardware.list_gpus()] == ["0", "1"]


def overlapping(a: dict, b: dict) -> bool:
    return a["started_at"] < (b["ended_at"] or float("inf")) and b["started_at"] < (a["ended_at"] or float("inf"))


def test_four_runs_on_two_gpus_wait_share_survive_a_restart_and_never_share_a_device(two_gpus, store, monkeypatch):
    monkeypatch.setenv(sw.STEP_SECONDS_ENV, "0.1")
    first = Orchestrator(store, worker_target=sw.notes_its_devices)
    seen = EventRecorder()
    first.subscribe(seen)
    try:
        long_a, long_b, waits, withdrawn = (first.start(scripted_config(num_gpus=1, max_steps=steps))
                                            for steps in (600, 600, 4, 4))
        # Two train at once, each on its own GPU; two wait, in order.
        for run_id in (long_a, long_b):
            seen.wait_for(lambda e, r=run_id: e["type"] == "progress" and e["run_id"] == r)
        assert sorted(first.active_run_ids()) == [long_a, long_b]
        assert [(r["id"], r["queue_position"]) for r in store.queued_runs()] == [(waits, 1), (withdrawn, 2)]
        assert first.run_snapshot(waits)["phase"] == "queued" and first.queue_position(withdrawn) == 2
        assert {d for r in (long_a, long_b) for d in store.get_run(r)["devices"]} == {"gpu-0", "gpu-1"}
        with pytest.raises(RunActive, match="active on the devices this run needs"):
            first.start(scripted_config(num_gpus=1, queue=False))

        assert first.stop_run(withdrawn, save=False) == "cancelled"
        seen.wait_for(lambda e: e.get("final") and e["run_id"] == withdrawn)
        # The server goes down (SIGTERM): the training runs stop and save; the queued one stays queued.
        assert first.stop_for_shutdown(30) == long_b
        assert first.wait_idle(WAIT_S)
    finally:
        first.shutdown()
    assert store.get_run(waits)["status"] == "queued"

    with Store(paths.db_path()) as reopened:  # the next server life, on the same database
        second = Orchestrator(reopened, worker_target=sw.notes_its_devices)
        after = EventRecorder()
        second.subscribe(after)
        try:
            after.wait_for(lambda e: e.get("final") and e["run_id"] == waits)
        finally:
            second.shutdown()
        rows = {r["id"]: r for r in reopened.list_runs()}

    assert {i: rows[i]["status"] for i in rows} == {long_a: "stopped", long_b: "stopped", waits: "completed",
                                                   withdrawn: "cancelled"}
    assert rows[withdrawn]["devices"] is None and not (Path(rows[withdrawn]["output_dir"]) / "devices.txt").exists()
    assert rows[waits]["resume_blocked"] is False and rows[long_a]["resume_blocked"] is False
    trained = [rows[i] for i in (long_a, long_b, waits)]
    for row in trained:  # what each worker was really given is what its row says it got
        assert row["devices"] == ["gpu-" + (Path(row["output_dir"]) / "devices.txt").read_text()]
    for i, a in enumerate(trained):
        for b in trained[i + 1:]:
            assert not (overlapping(a, b) and set(a["devices"]) & set(b["devices"])), (a["id"], b["id"])


def test_a_queued_run_with_a_secret_fails_clearly_after_a_restart(store, monkeypatch):
    monkeypatch.setenv(sw.STEP_SECONDS_ENV, "0.1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    first = Orchestrator(store, worker_target=sw.trainer)
    try:
        busy = first.start(scripted_config(max_steps=600))  # holds the CPU, this machine's one device
        waiting = first.start(scripted_config(hf_token="hf_queued_secret_1"))
        assert store.get_run(waiting)["status"] == "queued"
        assert "hf_queued_secret_1" not in str(store.get_run(waiting))
    finally:
        first.shutdown()
    assert store.get_run(busy)["status"] == "error"
    second = Orchestrator(store, worker_target=sw.trainer)
    recorder = EventRecorder()
    second.subscribe(recorder)
    try:
        second.start_queued()
        failed = store.get_run(waiting)
    finally:
        second.shutdown()
    assert failed["status"] == "error" and failed["devices"] == []
    assert failed["resume_blocked"] is False  # a resume that gives the secret starts it
    assert "waited in the queue across a server restart" in failed["error_message"]
    assert "hf_token" in failed["error_message"] and "HF_TOKEN" in failed["error_message"]
