"""GPU listing through `nvidia-smi` (a stand-in script on the PATH where the machine has
none) or, without it, through a torch probe child (a stand-in torch on its PYTHONPATH),
CUDA_VISIBLE_DEVICES handling with numbers, GPU and MIG UUIDs, and the automatic GPU choice."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from orch_helpers import scripted_config

from tunelab import hardware
from tunelab.config.run_config import check_machine
from tunelab.orchestrator.gpus import choose_gpus, gpu_env

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


MIG_LISTING = (
    "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa1111)\n"
    "  MIG 3g.20gb     Device  0: (UUID: MIG-1111aaaa-0000)\n"
    "  MIG 3g.20gb     Device  1: (UUID: MIG-2222bbbb-0000)\n"
    "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb2222)\n"
)


def test_mig_uuids_in_cuda_visible_devices_are_listed_and_pinned_by_uuid(smi_on_path, monkeypatch):
    smi_on_path(f'if [ "$1" = "-L" ]; then cat <<\'END\'\n{MIG_LISTING}END\nelse cat <<\'END\'\n{TABLE}END\nfi\n')
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-2222bbbb-0000,MIG-GPU-bbbb2222/1/0")
    gpus = hardware.list_gpus()
    assert [(g.index, g.pin, g.physical_index) for g in gpus] == [(0, "MIG-2222bbbb-0000", 0), (1, "MIG-GPU-bbbb2222/1/0", 1)]
    assert "MIG 3g.20gb" in gpus[0].name
    env = gpu_env(scripted_config(gpu_ids=[1]))
    assert env == {"CUDA_VISIBLE_DEVICES": "MIG-GPU-bbbb2222/1/0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbbb,MIG-unknown")  # CUDA stops at the unknown one
    assert [g.pin for g in hardware.list_gpus()] == ["1"]


# A stand-in for torch that the probe child imports instead of the real one: two devices,
# named after the device order the child was given.
FAKE_TORCH = '''
import os
class _Props:
    def __init__(self, i):
        self.uuid = f"{i}{i}{i}{i}-fake"
        self.name = "Fake GPU in " + os.environ.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
class cuda:
    is_available = staticmethod(lambda: True)
    device_count = staticmethod(lambda: 2)
    get_device_properties = staticmethod(_Props)
    mem_get_info = staticmethod(lambda i: ((10 + 30 * i) * 2**30, 80 * 2**30))
'''


@pytest.fixture
def driver_without_nvidia_smi(tmp_path, monkeypatch):
    """A machine with an NVIDIA driver, no nvidia-smi, and a torch that sees two GPUs."""
    marker = tmp_path / "nvidiactl"
    marker.touch()
    monkeypatch.setattr(hardware, "DRIVER_MARKERS", (str(marker),))
    fake = tmp_path / "fake_torch"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("PYTHONPATH", f"{fake}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_without_nvidia_smi_a_child_asks_torch_and_pinning_still_works(driver_without_nvidia_smi, monkeypatch):
    gpus = hardware.list_gpus()
    assert [(g.index, g.pin, g.free_mb, g.total_mb) for g in gpus] == [(0, "0", 10240, 81920), (1, "1", 40960, 81920)]
    assert gpus[0].name == "Fake GPU in PCI_BUS_ID"  # the probe numbers devices as children will
    assert gpu_env(scripted_config()) == {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    check_machine(scripted_config(training_type="qlora", gpu_ids=[1]), hardware.cuda_device_count())
    # UUIDs in the server's own CUDA_VISIBLE_DEVICES are handed on as they were given.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-9f0e,MIG-77aa")
    assert gpu_env(scripted_config(gpu_ids=[0])) == {"CUDA_VISIBLE_DEVICES": "GPU-9f0e", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def test_no_driver_means_no_probe_and_no_gpus(driver_without_nvidia_smi, monkeypatch, tmp_path):
    monkeypatch.setattr(hardware, "DRIVER_MARKERS", (str(tmp_path / "absent"),))
    assert hardware.list_gpus() == []


def test_listing_gpus_never_imports_torch_in_the_calling_process(driver_without_nvidia_smi):
    code = ("import sys; from tunelab import hardware; hardware.DRIVER_MARKERS = (sys.argv[1],); "
            "assert len(hardware.list_gpus()) == 2; assert 'torch' not in sys.modules, 'torch imported'")
    env = {**os.environ, "PYTHONPATH": f"{Path.cwd()}{os.pathsep}{os.environ['PYTHONPATH']}"}
    done = subprocess.run([sys.executable, "-c", code, hardware.DRIVER_MARKERS[0]], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
