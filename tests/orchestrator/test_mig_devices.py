"""MIG slices and odd device ids (a stand-in `nvidia-smi` on the PATH, scripted CPU
workers): every device id form gets a lock file of its own that works — an old-style MIG
id `MIG-GPU-<uuid>/<gi>/<ci>` holds a `/` — and a run never asks for several devices of
which one is a MIG slice, as CUDA shows a process only one slice: refused up front,
naming the reason, with nothing recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import scripted_workers as sw
from orch_helpers import finished, scripted_config

from tunelab import hardware, paths
from tunelab.config.run_config import ConfigError, check_machine
from tunelab.orchestrator import Orchestrator
from tunelab.orchestrator.gpus import choose_gpus
from tunelab.orchestrator.ownership import DeviceBusy, RunClaim, device_holder, lock_file

OLD_MIG = "MIG-GPU-bbbb2222/1/0"
SMI_TABLE = "0, GPU-aaaa1111, 81559, 70000, NVIDIA H100 80GB HBM3\n1, GPU-bbbb2222, 81559, 80000, NVIDIA H100 80GB HBM3\n"
SMI_LISTING = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa1111)\n"
               "  MIG 3g.40gb     Device  0: (UUID: MIG-1111aaaa-0000)\n"
               "  MIG 3g.40gb     Device  1: (UUID: MIG-2222aaaa-0000)\n"
               "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb2222)\n")
DEVICE_FORMS = ["cpu", "gpu-0", "gpu-GPU-aaaa1111", "gpu-MIG-1111aaaa-0000", f"gpu-{OLD_MIG}", "gpu-MIG-GPU-bbbb2222/1/1",
                "gpu-a/b", "gpu-a%2Fb", "gpu-..", "gpu-x\ny", "gpu-é", "gpu-" + "9" * 300]


@pytest.fixture
def mig_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two H100s; the first split into two MIG slices (`nvidia-smi -L` lists them)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nif [ \"$1\" = \"-L\" ]; then cat <<'END'\n{SMI_LISTING}END\n"
                   f"else cat <<'END'\n{SMI_TABLE}END\nfi\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_every_device_id_form_gets_one_stable_distinct_file_in_the_locks_folder(tmp_path):
    names = [lock_file(tmp_path, device) for device in DEVICE_FORMS]
    assert all(path.parent == tmp_path and len(path.name.encode()) < 255 for path in names), names
    assert len(set(names)) == len(DEVICE_FORMS), "two devices must never share a lock file"
    # Plain names stay readable as before (a lock held by an older tunelab is the same file).
    assert [p.name for p in names[:4]] == ["device-cpu.lock", "device-gpu-0.lock", "device-gpu-GPU-aaaa1111.lock",
                                           "device-gpu-MIG-1111aaaa-0000.lock"]
    # Another process (a server, a `tunelab train`, a chat child) names the same file.
    code = ("import sys, json; from pathlib import Path; from tunelab.orchestrator.ownership import lock_file; "
            "print(json.dumps([lock_file(Path(sys.argv[1]), d).name for d in json.loads(sys.argv[2])]))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path), json.dumps(DEVICE_FORMS)],
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [p.name for p in names]
    for device in DEVICE_FORMS:  # each one really locks, and is seen as held
        claim = RunClaim(tmp_path, [device])
        assert device_holder(tmp_path, device)["pid"] == os.getpid()
        with pytest.raises(DeviceBusy):
            RunClaim(tmp_path, [device])
        claim.release()
        assert device_holder(tmp_path, device) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in names)  # nothing outside, no subfolders


def test_a_run_on_an_old_style_mig_id_claims_its_device_trains_and_blocks_a_second_run(mig_machine, store, monkeypatch):
    monkeypatch.setenv(sw.STEP_SECONDS_ENV, "0.2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", OLD_MIG)
    assert [g.pin for g in hardware.list_gpus()] == [OLD_MIG]
    first = Orchestrator(store, worker_target=sw.trainer)
    second = Orchestrator(store, worker_target=sw.trainer)
    try:
        run_id = first.start(scripted_config(max_steps=200))
        holder = device_holder(paths.locks_dir(store.path), f"gpu-{OLD_MIG}")
        assert holder is not None and holder["pid"] == os.getpid()
        with pytest.raises(DeviceBusy, match=rf"run {run_id} .*is training on gpu-{OLD_MIG}"):
            second.start(scripted_config(queue=False))
        first.stop(save=False)
        assert finished(first, run_id)["status"] == "stopped"
        again = second.start(scripted_config())
        assert finished(second, again)["status"] == "completed"
    finally:
        first.shutdown()
        second.shutdown()


def test_several_mig_slices_in_one_run_are_refused_before_anything_starts(mig_machine, store, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"MIG-1111aaaa-0000,MIG-2222aaaa-0000,{OLD_MIG}")
    assert [g.is_mig for g in hardware.list_gpus()] == [True, True, True]
    orchestrator = Orchestrator(store, worker_target=sw.trainer)
    try:
        with pytest.raises(ConfigError) as refused:
            orchestrator.start(scripted_config(gpu_ids=[0, 2]))
        assert refused.value.errors[0].field == "gpu_ids"
        assert "CUDA shows a process only one MIG slice" in str(refused.value)
        with pytest.raises(ConfigError) as refused:
            orchestrator.start(scripted_config(num_gpus=2))
        assert refused.value.errors[0].field == "num_gpus" and "this machine has 0 (besides 3 MIG slices)" in str(refused.value)
        assert store.count_runs() == 0, "a refused start leaves no row"
        one = orchestrator.start(scripted_config(gpu_ids=[1]))  # one slice per run is fine
        assert finished(orchestrator, one)["status"] == "completed"
    finally:
        orchestrator.shutdown()


def test_several_gpus_are_chosen_among_whole_gpus_only(mig_machine, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1111aaaa-0000,0,1")
    gpus = hardware.list_gpus()
    assert [(g.pin, g.is_mig) for g in gpus] == [("MIG-1111aaaa-0000", True), ("0", False), ("1", False)]
    assert [g.pin for g in choose_gpus(scripted_config(num_gpus=2), gpus)] == ["1", "0"]
    with pytest.raises(ConfigError, match="num_gpus=3 needs 3 whole GPUs and this machine has 2"):
        check_machine(scripted_config(num_gpus=3), len(gpus), hardware.mig_slices(gpus))


def test_the_cli_refuses_two_slices_with_exit_2_naming_the_reason(mig_machine, tmp_path, monkeypatch):
    config = tmp_path / "run.yaml"
    config.write_text("model_name: scripted/tiny\nlocal_datasets: [/nowhere/train.jsonl]\nmax_steps: 5\ngpu_ids: [0, 1]\n")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "MIG-1111aaaa-0000,MIG-2222aaaa-0000", "TUNELAB_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-m", "tunelab.cli.main", "train", str(config), "--local"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "gpu_ids" in said and "MIG slice" in said
    assert not (tmp_path / "home" / "outputs").exists() or not any((tmp_path / "home" / "outputs").iterdir())
