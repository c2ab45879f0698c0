"""What a worker's environment holds: the chosen GPU (from a stand-in `nvidia-smi` on the
PATH, a real program the orchestrator runs), and HF_HUB_DISABLE_XET after a stall; never
the server's own credentials."""

from __future__ import annotations

import json
import os

import pytest
import scripted_workers as sw
from orch_helpers import finished, scripted_config

from tunelab.config.run_config import ConfigError

SMI_SCRIPT = """#!/bin/sh
cat "{table}"
"""


@pytest.fixture
def fake_gpus(tmp_path, monkeypatch):
    """Put an `nvidia-smi` on the PATH that prints the table in a file the test controls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    table = tmp_path / "gpus.csv"
    smi = bin_dir / "nvidia-smi"
    smi.write_text(SMI_SCRIPT.format(table=table))
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def set_free(free_mib: list[int]) -> None:
        table.write_text("".join(f"{i}, GPU-{i:04d}, 81920, {free}, NVIDIA Test {i}\n" for i, free in enumerate(free_mib)))

    return set_free


def _child_env(recorder) -> dict:
    message = recorder.wait_for(lambda e: e["type"] == "status" and e["message"].startswith("env "))["message"]
    return json.loads(message.removeprefix("env "))


def test_gpu_is_chosen_by_free_memory_after_the_before_spawn_hook(orchestrator_for, fake_gpus):
    fake_gpus([40000, 70000, 10000])
    orch, recorder = orchestrator_for(sw.reports_environment, before_spawn=lambda: fake_gpus([40000, 1000, 75000]))
    run_id = orch.start(scripted_config())
    assert _child_env(recorder)["CUDA_VISIBLE_DEVICES"] == "2"  # the most free once the hook had run
    assert finished(orch, run_id)["status"] == "completed"


def test_explicit_gpu_ids_are_used_as_given(orchestrator_for, fake_gpus):
    fake_gpus([80000, 100, 100])
    orch, recorder = orchestrator_for(sw.reports_environment)
    run_id = orch.start(scripted_config(gpu_ids=[2]))
    assert _child_env(recorder)["CUDA_VISIBLE_DEVICES"] == "2"
    finished(orch, run_id)
    with pytest.raises(ConfigError) as missing:
        orch.start(scripted_config(gpu_ids=[3]))
    assert missing.value.errors[0].field == "gpu_ids"


def test_several_gpu_ids_pin_all_of_them_and_num_gpus_picks_the_freest(orchestrator_for, store, fake_gpus):
    fake_gpus([80000, 20000, 70000, 75000])
    orch, recorder = orchestrator_for(sw.reports_environment)
    run_id = orch.start(scripted_config(gpu_ids=[0, 1]))
    assert _child_env(recorder)["CUDA_VISIBLE_DEVICES"] == "0,1"
    finished(orch, run_id)
    recorder.events.clear()
    run_id = orch.start(scripted_config(num_gpus=3))
    assert _child_env(recorder)["CUDA_VISIBLE_DEVICES"] == "0,3,2"
    finished(orch, run_id)
    with pytest.raises(ConfigError) as refused:
        orch.start(scripted_config(num_gpus=5))
    assert refused.value.errors[0].field == "num_gpus" and "has 4" in refused.value.errors[0].message
    with pytest.raises(ConfigError) as mismatch:
        orch.start(scripted_config(gpu_ids=[0, 1], num_processes=3))
    assert mismatch.value.errors[0].field == "num_processes"


def test_explicit_gpu_ids_on_a_machine_without_gpus_are_a_config_error(orchestrator_for, store, tmp_path, monkeypatch):
    empty = tmp_path / "no-nvidia-smi-here"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    orch, _ = orchestrator_for(sw.reports_environment)
    with pytest.raises(ConfigError) as refused:
        orch.start(scripted_config(gpu_ids=[0]))
    assert refused.value.errors[0].field == "gpu_ids"
    assert "no CUDA GPUs" in refused.value.errors[0].message
    assert store.count_runs() == 0 and not orch.is_training_active()


def test_cpu_machine_leaves_cuda_visible_devices_alone(orchestrator_for, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("SCRIPTED_MARKER", "inherited")
    orch, recorder = orchestrator_for(sw.reports_environment)
    run_id = orch.start(scripted_config())
    env = _child_env(recorder)
    assert env["CUDA_VISIBLE_DEVICES"] is None and env["SCRIPTED_MARKER"] == "inherited"
    finished(orch, run_id)


def test_a_stall_respawns_the_worker_once_with_xet_disabled(orchestrator_for, store, monkeypatch):
    monkeypatch.delenv("HF_HUB_DISABLE_XET", raising=False)
    orch, recorder = orchestrator_for(sw.stalls_unless_xet_disabled)
    run_id = orch.start(scripted_config())
    row = finished(orch, run_id)
    assert row["status"] == "completed"
    assert recorder.wait_for(lambda e: e["type"] == "status" and "HF_HUB_DISABLE_XET=1" in e["message"])
    assert [e["type"] for e in recorder.events].count("stall") == 1
    assert store.count_runs() == 1 and [m["step"] for m in store.get_metrics(run_id)] == [1, 2]
    assert "HF_HUB_DISABLE_XET" not in os.environ  # the parent's own environment is untouched


def test_a_second_stall_is_an_error_about_the_network(orchestrator_for, store, monkeypatch):
    monkeypatch.delenv("HF_HUB_DISABLE_XET", raising=False)
    orch, _ = orchestrator_for(sw.always_stalls)
    run_id = orch.start(scripted_config())
    row = finished(orch, run_id)
    assert row["status"] == "error"
    assert row["error_message"] == "model download stalled twice; check the network"
    assert store.count_runs() == 1


def test_the_worker_never_sees_the_servers_database_url_or_token(orchestrator_for, monkeypatch):
    # User code runs in the worker (reward functions, remote-code models): the password in
    # the database URL and the API token must not be there to read.
    monkeypatch.setenv("TUNELAB_DATABASE_URL", "postgresql://tunelab:s3cret@db.example/tunelab")
    monkeypatch.setenv("TUNELAB_TOKEN", "the-api-token")
    orch, recorder = orchestrator_for(sw.reports_environment)
    run_id = orch.start(scripted_config())
    seen = _child_env(recorder)
    assert seen["TUNELAB_DATABASE_URL"] is None and seen["TUNELAB_TOKEN"] is None
    assert finished(orch, run_id)["status"] == "completed"
    assert os.environ["TUNELAB_TOKEN"] == "the-api-token"  # the parent keeps its own

