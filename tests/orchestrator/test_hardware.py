"""GPU listing through `nvidia-smi` (a stand-in script on the PATH where the machine has
none), CUDA_VISIBLE_DEVICES handling, and the automatic GPU choice."""

from __future__ import annotations

import os
import shutil

import pytest
from orch_helpers import scripted_config

from tunelab import hardware
from tunelab.orchestrator.gpus import choose_gpus

TABLE = (
    "0, GPU-aaaa1111, 81559, 1200, NVIDIA H100 80GB HBM3\n"
    "1, GPU-bbbb2222, 81559, 80000, NVIDIA H100 80GB HBM3\n"
    "2, GPU-cccc3333, [N/A], [N/A], NVIDIA A100, PCIe, 40GB\n"
)


@pytest.fixture
def smi_on_path(tmp_path, monkeypatch):
    def install(body: str) -> None:
        script = tmp_path / "nvidia-smi"
        script.write_text("#!/bin/sh\n" + body)
        script.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return install


def test_parse_rows_including_unknown_memory_and_commas_in_names():
    gpus = hardware.parse_nvidia_smi(TABLE + "\ngarbage line\n")
    assert [(g.index, g.free_mb, g.total_mb) for g in gpus] == [(0, 1200, 81559), (1, 80000, 81559), (2, None, None)]
    assert gpus[2].name == "NVIDIA A100, PCIe, 40GB" and gpus[1].uuid == "GPU-bbbb2222"


def test_list_gpus_runs_nvidia_smi(smi_on_path):
    smi_on_path(f"cat <<'END'\n{TABLE}END\n")
    assert [g.index for g in hardware.list_gpus()] == [0, 1, 2]
    assert hardware.cuda_device_count() == 3


def test_failing_or_missing_nvidia_smi_means_no_gpus(smi_on_path, tmp_path, monkeypatch):
    smi_on_path("echo 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert hardware.list_gpus() == []
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert shutil.which("nvidia-smi") is None and hardware.cuda_device_count() == 0


def test_cuda_visible_devices_of_the_server_renumbers_like_cuda(smi_on_path, monkeypatch):
    smi_on_path(f"cat <<'END'\n{TABLE}END\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,GPU-aaaa")
    gpus = hardware.list_gpus()
    assert [(g.index, g.physical_index) for g in gpus] == [(0, 2), (1, 0)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,7,0")  # CUDA stops at the first unknown id
    assert [g.physical_index for g in hardware.list_gpus()] == [1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert hardware.list_gpus() == []


def test_automatic_choice_takes_the_most_free_memory_and_mlx_takes_none():
    gpus = hardware.parse_nvidia_smi(TABLE)
    assert [g.index for g in choose_gpus(scripted_config(), gpus)] == [1]
    assert [g.index for g in choose_gpus(scripted_config(gpu_ids=[2, 0]), gpus)] == [2, 0]
    assert choose_gpus(scripted_config(), []) == []
    mlx = scripted_config(backend="mlx", local_datasets=["/x.jsonl"])
    assert choose_gpus(mlx, gpus) == []
