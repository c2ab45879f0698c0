"""Builds checkpoint folders by hand, file by file, for tests that need one on disk.

Weights are real safetensors files (written by the safetensors library); `.pt` files
are real zip archives shaped like torch.save's output (`<name>/data.pkl` inside), so the
validator is tested against the formats it meets in practice without importing torch.
"""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file


def write_safetensors(path: Path, tensors: dict[str, np.ndarray] | None = None) -> Path:
    save_file(tensors if tensors is not None else {"lora_A.weight": np.ones((4, 2), dtype=np.float32)}, str(path))
    return path


def write_torch_zip(path: Path, payload: bytes | None = None) -> Path:
    """A zip archive laid out like torch.save's: `<stem>/data.pkl` plus a version entry."""
    data = payload if payload is not None else pickle.dumps({"state": {}, "param_groups": []}, protocol=2)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(f"{path.stem}/data.pkl", data)
        archive.writestr(f"{path.stem}/version", "3\n")
    path.write_bytes(buffer.getvalue())
    return path


def make_checkpoint(
    output_dir: Path,
    step: int,
    *,
    weights: str | None = "adapter_model.safetensors",
    optimizer: str | None = "optimizer.pt",
    scheduler: str | None = "scheduler.pt",
    global_step: int | None = None,
    folder_name: str | None = None,
) -> Path:
    """A complete checkpoint folder; pass None for a part to leave it out."""
    folder = output_dir / (folder_name or f"checkpoint-{step}")
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step if global_step is None else global_step}))
    if weights is not None:
        if weights.endswith(".safetensors"):
            write_safetensors(folder / weights)
        elif weights.endswith(".index.json"):
            shard = "model-00001-of-00001.safetensors"
            write_safetensors(folder / shard)
            (folder / weights).write_text(json.dumps({"weight_map": {"lora_A.weight": shard}}))
        else:
            write_torch_zip(folder / weights)
    if optimizer is not None:
        if optimizer.endswith(".safetensors"):
            write_safetensors(folder / optimizer, {"state.0.m": np.zeros(3, dtype=np.float32)})
        else:
            write_torch_zip(folder / optimizer)
    if scheduler is not None:
        if scheduler.endswith(".json"):
            (folder / scheduler).write_text(json.dumps({"step": step}))
        else:
            write_torch_zip(folder / scheduler)
    return folder
