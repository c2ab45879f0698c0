"""Checkpoint validation: every rule of ARCHITECTURE "Checkpoints", each failure with a
readable reason, and pickle files that are inspected but never unpickled."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from checkpoint_factory import make_checkpoint, write_safetensors, write_torch_zip
from tunelab.checkpoints import InvalidCheckpoint, latest_valid_checkpoint, validate_checkpoint


@pytest.mark.parametrize(
    "parts, kind",
    [
        ({}, "adapter"),
        ({"weights": "adapter_model.bin"}, "adapter"),
        ({"weights": "model.safetensors"}, "full"),
        ({"weights": "model.safetensors.index.json"}, "full"),
        ({"weights": "pytorch_model.bin"}, "full"),
        ({"weights": "adapters.safetensors", "optimizer": "optimizer.safetensors", "scheduler": "scheduler.json"}, "mlx"),
    ],
)
def test_complete_checkpoints_are_valid(tmp_path: Path, parts: dict, kind: str) -> None:
    folder = make_checkpoint(tmp_path, 12, **parts)
    info = validate_checkpoint(folder)
    assert (info.path, info.step, info.kind) == (folder, 12, kind)


def _truncate(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def _break(folder: Path, how: str) -> None:
    """Damage a complete checkpoint in one way."""
    weights = folder / "adapter_model.safetensors"
    if how == "state_missing":
        (folder / "trainer_state.json").unlink()
    elif how == "state_garbage":
        (folder / "trainer_state.json").write_text("{not json")
    elif how == "state_no_step":
        (folder / "trainer_state.json").write_text(json.dumps({"epoch": 1.0}))
    elif how == "weights_missing":
        weights.unlink()
    elif how == "weights_truncated":
        _truncate(weights, weights.stat().st_size - 4)
    elif how == "weights_header_cut":
        _truncate(weights, 20)
    elif how == "weights_tiny":
        _truncate(weights, 5)
    elif how == "weights_random":
        weights.write_bytes(os.urandom(256))
    elif how == "weights_not_json":
        weights.write_bytes((12).to_bytes(8, "little") + b"\xff\xfe not json!")
    elif how == "weights_empty":
        write_safetensors(weights, {})
    elif how == "optimizer_missing":
        (folder / "optimizer.pt").unlink()
    elif how == "optimizer_garbage":
        (folder / "optimizer.pt").write_bytes(b"this is not a torch file")
    elif how == "optimizer_truncated_zip":
        _truncate(folder / "optimizer.pt", 40)
    elif how == "optimizer_zip_without_pickle":
        (folder / "optimizer.pt").unlink()
        import zipfile

        with zipfile.ZipFile(folder / "optimizer.pt", "w") as archive:
            archive.writestr("optimizer/readme.txt", "hello")
    elif how == "scheduler_missing":
        (folder / "scheduler.pt").unlink()
    else:
        raise AssertionError(how)


@pytest.mark.parametrize(
    "how, words",
    [
        ("state_missing", "trainer_state.json is missing"),
        ("state_garbage", "cannot be read as JSON"),
        ("state_no_step", "no integer global_step"),
        ("weights_missing", "no weights file"),
        ("weights_truncated", "truncated"),
        ("weights_header_cut", "corrupt safetensors header length"),
        ("weights_tiny", "too short"),
        ("weights_random", "corrupt safetensors header length"),
        ("weights_not_json", "not JSON"),
        ("weights_empty", "holds no tensors"),
        ("optimizer_missing", "optimizer state is missing"),
        ("optimizer_garbage", "neither a torch zip archive nor a pickle"),
        ("optimizer_truncated_zip", "damaged or truncated zip"),
        ("optimizer_zip_without_pickle", "without a data.pkl"),
        ("scheduler_missing", "scheduler state is missing"),
    ],
)
def test_each_damage_is_refused_with_its_reason(tmp_path: Path, how: str, words: str) -> None:
    folder = make_checkpoint(tmp_path, 5)
    validate_checkpoint(folder)
    _break(folder, how)
    with pytest.raises(InvalidCheckpoint) as info:
        validate_checkpoint(folder)
    assert words in info.value.reason
    assert str(folder) in str(info.value)


def test_global_step_must_match_the_folder(tmp_path: Path) -> None:
    folder = make_checkpoint(tmp_path, 20, global_step=19)
    with pytest.raises(InvalidCheckpoint, match="global_step 19 but the folder is for step 20"):
        validate_checkpoint(folder)


@pytest.mark.parametrize(
    "name, words",
    [("tmp-checkpoint-7", "partial save"), ("final", "not checkpoint-<step>"), ("checkpoint-x", "not checkpoint-<step>")],
)
def test_folder_names(tmp_path: Path, name: str, words: str) -> None:
    folder = make_checkpoint(tmp_path, 7, folder_name=name)
    with pytest.raises(InvalidCheckpoint, match=words):
        validate_checkpoint(folder)


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(InvalidCheckpoint, match="does not exist"):
        validate_checkpoint(tmp_path / "checkpoint-3")


def test_sharded_weights_need_every_shard(tmp_path: Path) -> None:
    folder = make_checkpoint(tmp_path, 4, weights="model.safetensors.index.json")
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": "model-00001-of-00001.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    with pytest.raises(InvalidCheckpoint, match="shard model-00002-of-00002.safetensors .* is missing"):
        validate_checkpoint(folder)

    write_safetensors(folder / "model-00002-of-00002.safetensors")
    validate_checkpoint(folder)

    # A shard name must not lead out of the folder, even to a file that exists.
    outside = write_safetensors(tmp_path / "elsewhere.safetensors")
    index.write_text(json.dumps({"weight_map": {"a": f"../{outside.name}"}}))
    with pytest.raises(InvalidCheckpoint, match="not a plain file name"):
        validate_checkpoint(folder)

    index.write_text(json.dumps({"metadata": {}}))
    with pytest.raises(InvalidCheckpoint, match="no weight_map"):
        validate_checkpoint(folder)


def test_latest_valid_checkpoint_skips_broken_partial_and_linked(tmp_path: Path) -> None:
    run = tmp_path / "run"
    make_checkpoint(run, 2)
    make_checkpoint(run, 9)
    make_checkpoint(run, 10)
    make_checkpoint(run, 30, optimizer=None)  # newest but incomplete
    make_checkpoint(run, 40, folder_name="tmp-checkpoint-40")  # complete files, unfinished rename
    outside = make_checkpoint(tmp_path / "other", 50)
    (run / "checkpoint-50").symlink_to(outside, target_is_directory=True)
    (run / "checkpoint-60").write_text("a file, not a folder")

    # Numeric order: checkpoint-10 is newer than checkpoint-9.
    assert latest_valid_checkpoint(run) == run / "checkpoint-10"
    assert latest_valid_checkpoint(str(run)) == run / "checkpoint-10"


def test_latest_valid_checkpoint_when_there_is_none(tmp_path: Path) -> None:
    assert latest_valid_checkpoint(None) is None
    assert latest_valid_checkpoint(tmp_path / "missing") is None
    make_checkpoint(tmp_path, 3, scheduler=None)
    assert latest_valid_checkpoint(tmp_path) is None


def test_mlx_optimizer_without_tensors_is_accepted(tmp_path: Path) -> None:
    folder = make_checkpoint(tmp_path, 8, weights="adapters.safetensors", optimizer=None, scheduler="scheduler.json")
    write_safetensors(folder / "optimizer.safetensors", {})
    assert validate_checkpoint(folder).kind == "mlx"


class _CreatesMarker:
    """Unpickling this object opens (creates) the marker file: the kind of payload a
    hostile checkpoint carries."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_pickle_files_are_never_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "unpickled-marker"
    payload = pickle.dumps(_CreatesMarker(marker), protocol=2)
    folder = make_checkpoint(tmp_path / "run", 6, weights=None)
    (folder / "pytorch_model.bin").write_bytes(payload)  # legacy pickle stream
    write_torch_zip(folder / "optimizer.pt", payload)  # torch zip with a hostile data.pkl
    write_torch_zip(folder / "scheduler.pt", payload)

    assert validate_checkpoint(folder).kind == "full"
    assert latest_valid_checkpoint(folder.parent) == folder
    assert not marker.exists()

    # The payload is live: loading it really would have created the marker.
    pickle.loads(payload).close()
    assert marker.exists()


def test_real_torch_saves_pass_the_structural_check(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    folder = make_checkpoint(tmp_path, 3, weights=None, optimizer=None, scheduler=None)
    torch.save({"w": torch.zeros(2)}, folder / "pytorch_model.bin")
    torch.save({"state": {}, "param_groups": []}, folder / "optimizer.pt", _use_new_zipfile_serialization=False)
    torch.save({"last_epoch": 3}, folder / "scheduler.pt")
    assert validate_checkpoint(folder).kind == "full"


def test_real_safetensors_with_metadata_and_several_tensors(tmp_path: Path) -> None:
    folder = make_checkpoint(tmp_path, 1, weights=None)
    from safetensors.numpy import save_file

    save_file({"a": np.ones((3, 3), dtype=np.float16), "b": np.arange(5, dtype=np.int64)}, str(folder / "model.safetensors"), metadata={"format": "pt"})
    assert validate_checkpoint(folder).kind == "full"


def test_module_imports_without_torch_or_safetensors() -> None:
    code = (
        "import sys, tunelab.checkpoints, tunelab.store, tunelab.orchestrator.plots, tunelab.orchestrator.metric_buffer;"
        "heavy = {'torch', 'safetensors', 'matplotlib', 'transformers'} & set(sys.modules);"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_folder_too_long_to_look_up_holds_no_checkpoint(tmp_path: Path) -> None:
    """A stored output_dir the system cannot look up (ENAMETOOLONG) must not raise: the
    run history lists runs through latest_valid_checkpoint."""
    too_long = tmp_path / ("x" * 300)
    assert latest_valid_checkpoint(too_long) is None
    with pytest.raises(InvalidCheckpoint, match="cannot be looked up"):
        validate_checkpoint(too_long / "checkpoint-2")
