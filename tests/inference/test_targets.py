"""Which weights a run id (and checkpoint) means, model ids, and where a child may run —
all torch-free, with real run rows, real checkpoint folders and real device locks."""

from __future__ import annotations

import shutil

import pytest

from checkpoint_factory import make_checkpoint
from tunelab import paths
from tunelab.hardware import Gpu
from tunelab.inference.devices import DeviceBusy, choose_device, training_on
from tunelab.inference.target import (TargetInputError, TargetNotFound, TargetRefused, model_id, parse_model_id,
                                      resolve_target, servable_targets)
from tunelab.orchestrator.ownership import RunClaim
from tunelab.store import Store


@pytest.fixture
def store(home):
    with Store(paths.db_path()) as db:
        yield db


def _run(store, status, output_dir=None, **finals):
    run_id = store.create_run({"model_name": "base-model"}, "base-model", "data")
    if status != "running":
        store.finalize_run(run_id, status=status, output_dir=str(output_dir) if output_dir else None, **finals)
    return run_id


def test_model_ids_round_trip():
    assert model_id(12) == "run-12" and model_id(12, base=True) == "run-12-base"
    assert parse_model_id(model_id(3, 40, True)) == (3, 40, True)
    assert parse_model_id("run-7") == (7, None, False)
    for other in ("gpt-4o", "run-", "run-1-basement", "run-x", ""):
        assert parse_model_id(other) is None


def test_a_completed_adapter_run_answers_from_its_folder(store, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "adapter_model.safetensors").write_bytes(b"x")
    run_id = _run(store, "completed", folder)
    target = resolve_target(store.get_run(run_id), run_id)
    assert (target.kind, target.weights, target.step, target.base_model) == ("adapter", folder, None, "base-model")
    assert [(t.run_id, run["id"]) for t, run in servable_targets(store.list_runs())] == [(run_id, run_id)]


def test_checkpoints_stopped_and_failed_runs(store, tmp_path):
    folder = tmp_path / "run"
    for step in (2, 4):
        make_checkpoint(folder, step)
    stopped = _run(store, "stopped", folder, final_step=2)
    target = resolve_target(store.get_run(stopped), stopped)
    assert target.step == 2  # the checkpoint the stop saved, not a later one in the folder
    assert resolve_target(store.get_run(stopped), stopped, 4).weights == folder / "checkpoint-4"
    with pytest.raises(TargetInputError) as bad:
        resolve_target(store.get_run(stopped), stopped, 3)
    assert bad.value.field == "checkpoint" and "valid checkpoints" in str(bad.value) and "2, 4" in str(bad.value)
    failed = _run(store, "error", folder, error_message="boom")
    with pytest.raises(TargetRefused, match="ended in error .boom.*valid checkpoints.*2, 4"):
        resolve_target(store.get_run(failed), failed)
    assert resolve_target(store.get_run(failed), failed, 4).step == 4  # a failed run's checkpoint still answers


def test_runs_that_cannot_answer_say_why(store, tmp_path):
    with pytest.raises(TargetNotFound, match="no run 77"):
        resolve_target(store.get_run(77), 77)
    running = _run(store, "running")
    with pytest.raises(TargetRefused, match="still training"):
        resolve_target(store.get_run(running), running)
    empty = tmp_path / "empty"
    empty.mkdir()
    hollow = _run(store, "completed", empty)
    with pytest.raises(TargetRefused, match="holds no weights file"):
        resolve_target(store.get_run(hollow), hollow)
    shutil.rmtree(empty)
    with pytest.raises(TargetRefused, match="no longer exists"):
        resolve_target(store.get_run(hollow), hollow)
    mlx = tmp_path / "mlx"
    mlx.mkdir()
    (mlx / "adapters.safetensors").write_bytes(b"x")
    mlx_run = _run(store, "completed", mlx)
    with pytest.raises(TargetRefused, match="mlx"):
        resolve_target(store.get_run(mlx_run), mlx_run)
    for modality, reason in (("embedding", "embedding model"), ("speech", "transcribes audio.*tunelab eval"), ("tts", "speak with it")):
        other = _run(store, "completed", mlx)
        store.set_modality(other, modality)
        with pytest.raises(TargetRefused, match=reason):
            resolve_target(store.get_run(other), other)
    # An evaluation measures a speech-to-text run (its word error rate): only its weights decide.
    with pytest.raises(TargetRefused, match="mlx"):
        resolve_target(store.get_run(other - 1), other - 1, evaluate=True)
    with pytest.raises(TargetRefused, match="embedding model"):
        resolve_target(store.get_run(other - 2), other - 2, evaluate=True)
    assert servable_targets(store.list_runs()) == []
    # Speaking is the other way round: a text-to-speech run only, the others refused naming what they trained.
    with pytest.raises(TargetRefused, match="trained a text model, not a text-to-speech one.*tunelab chat"):
        resolve_target(store.get_run(hollow), hollow, speech=True)
    with pytest.raises(TargetRefused, match="trained an embedding model, not a text-to-speech one"):
        resolve_target(store.get_run(other - 2), other - 2, speech=True)


def _gpu(index: int, free_mb: int) -> Gpu:
    return Gpu(index=index, physical_index=index, uuid=f"GPU-{index}", name="test GPU", total_mb=80_000, free_mb=free_mb)


def test_a_child_never_gets_a_gpu_a_training_run_holds(home):
    locks = paths.locks_dir(paths.db_path())
    assert choose_device(locks, []) == ("cpu", {"CUDA_VISIBLE_DEVICES": ""})
    gpus = [_gpu(0, 70_000), _gpu(1, 10_000)]
    assert choose_device(locks, gpus)[0] == "gpu-0"  # the one with the most free memory
    claim = RunClaim(locks, ["gpu-0"])
    claim.record_run(5)
    try:
        device, env = choose_device(locks, gpus)
        assert device == "gpu-1" and env["CUDA_VISIBLE_DEVICES"] == "1"
        assert training_on(locks, "gpu-0").startswith("run 5") and training_on(locks, "gpu-1") is None
        with pytest.raises(DeviceBusy, match="every GPU is training.*GPU 0: run 5"):
            choose_device(locks, gpus[:1])
    finally:
        claim.release()
    assert choose_device(locks, gpus[:1])[0] == "gpu-0"
    assert training_on(locks, "cpu") is None
