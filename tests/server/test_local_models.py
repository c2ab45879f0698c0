"""The local-model scan behind GET /api/models/local, on real folders: what counts as a
model, the Hugging Face cache's layout and where it is looked for, the bounds, and
that nothing outside the data roots is named (links are not followed out)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tunelab.server import local_models
from tunelab.server.local_models import hf_hub_cache, hub_id, local_models as scan_all, scan_hf_cache, scan_roots


def model_folder(folder: Path, weights: str = "model.safetensors") -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / weights).write_bytes(b"\0")
    return folder


def cached_model(cache: Path, name: str, with_config: bool = True) -> None:
    """The huggingface_hub layout: snapshot files are links into blobs/."""
    entry = cache / name
    (entry / "blobs").mkdir(parents=True)
    snapshot = entry / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    if with_config:
        (entry / "blobs" / "f00d").write_text("{}")
        (snapshot / "config.json").symlink_to(entry / "blobs" / "f00d")


def names(models) -> list[str]:
    return [m.name for m in models]


def test_hub_ids_come_from_the_cache_folder_names():
    assert hub_id("models--org--name") == "org/name"
    assert hub_id("models--gpt2") == "gpt2"
    for other in ("datasets--org--data", "models--", "models--a--b--c", "models----x", ".locks"):
        assert hub_id(other) is None, other


def test_the_cache_lists_models_with_a_config_by_hub_id(tmp_path):
    cached_model(tmp_path, "models--acme--tiny-chat")
    cached_model(tmp_path, "models--gpt2")
    cached_model(tmp_path, "models--acme--half-downloaded", with_config=False)
    cached_model(tmp_path, "datasets--acme--data")
    found = scan_hf_cache(tmp_path)
    assert names(found) == ["acme/tiny-chat", "gpt2"]
    assert all(m.kind == "hf_cache" and str(tmp_path) not in m.name + m.label for m in found)


def test_a_missing_cache_is_an_empty_list(tmp_path):
    assert scan_hf_cache(tmp_path / "nowhere") == []


def test_the_cache_is_found_where_huggingface_hub_looks(tmp_path, monkeypatch):
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hf_hub_cache() == tmp_path / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hf_hub_cache() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hf_hub_cache() == tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert hf_hub_cache() == tmp_path / "hub"


def test_model_folders_in_the_roots_and_only_whole_models(tmp_path):
    root = tmp_path / "root"
    model_folder(root / "llama")
    model_folder(root / "team" / "sharded", weights="model.safetensors.index.json")
    adapter = root / "adapter-only"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    (adapter / "adapter_model.safetensors").write_bytes(b"\0")
    (root / "config-only").mkdir()
    (root / "config-only" / "config.json").write_text("{}")
    model_folder(root / "run" / "checkpoint-10")       # checkpoints are resumed, not offered
    model_folder(root / ".hidden" / "model")           # caches and half-built folders
    model_folder(root / "llama" / "inner")             # inside a model: not a model of its own
    found = scan_roots([root])
    assert sorted(names(found)) == sorted([str(root / "llama"), str(root / "team" / "sharded")])
    assert {m.kind for m in found} == {"folder"}


def test_links_out_of_a_root_are_not_followed(tmp_path):
    outside = model_folder(tmp_path / "outside" / "secret-model")
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside.parent, target_is_directory=True)
    (root / "direct").symlink_to(outside, target_is_directory=True)
    assert scan_roots([root]) == []


def test_the_scan_is_bounded_in_depth_folders_and_answers(tmp_path):
    root = tmp_path / "root"
    model_folder(root / "a" / "b" / "c" / "too-deep")
    assert scan_roots([root]) == []
    assert names(scan_roots([root], max_depth=4)) == [str(root / "a" / "b" / "c" / "too-deep")]
    for i in range(5):
        model_folder(root / f"m{i}")
    assert len(scan_roots([root], limit=3)) == 3
    assert scan_roots([root], max_folders=1) == []  # the root itself used the whole budget


def test_a_resumed_runs_merged_export_is_found_under_its_own_name(tmp_path):
    shared = tmp_path / "outputs" / "20260101-lora"
    model_folder(shared / "export-merged")         # the first run's, stopped and exported
    model_folder(shared / "run-2-export-merged")   # the run that resumed it and completed
    runs = [{"id": 2, "status": "completed", "output_dir": str(shared), "display_name": None, "resumed_from_run_id": 1},
            {"id": 1, "status": "stopped", "output_dir": str(shared), "display_name": None}]
    found = [m for m in local_models.finished_runs(runs, [tmp_path / "outputs"])]
    assert [(m.name, m.label) for m in found] == [(str(shared / "run-2-export-merged"), "run #2 (merged export): continue from it")]


def test_the_demo_finished_runs_and_the_cache_in_one_list(tmp_path, monkeypatch):
    cache_root, outputs = tmp_path / "cache", tmp_path / "outputs"
    demo = model_folder(cache_root / "demo-v1" / "model")
    (cache_root / "demo-v1" / "READY").write_text("demo-v1")
    full_run = model_folder(outputs / "20260101-full")
    adapter_run = outputs / "20260101-lora"
    model_folder(adapter_run / "export-merged")
    not_finished = model_folder(outputs / "20260101-stopped")
    elsewhere = model_folder(tmp_path / "elsewhere" / "run")
    runs = [{"id": 4, "status": "completed", "output_dir": str(full_run), "display_name": "full one"},
            {"id": 3, "status": "completed", "output_dir": str(adapter_run), "display_name": None},
            {"id": 2, "status": "stopped", "output_dir": str(not_finished), "display_name": None},
            {"id": 1, "status": "completed", "output_dir": str(elsewhere), "display_name": None}]
    hub = tmp_path / "hub"
    cached_model(hub, "models--acme--tiny")
    found, truncated = scan_all(runs, [cache_root, outputs], hub)
    assert not truncated
    by_name = {m.name: m for m in found}
    assert found[0].name == str(demo) and found[0].kind == "demo"
    assert by_name[str(full_run)].kind == "run" and "full one" in by_name[str(full_run)].label
    assert by_name[str(adapter_run / "export-merged")].kind == "run"
    assert by_name[str(not_finished)].kind == "folder"   # still a model folder, though not a finished run
    assert str(elsewhere) not in by_name                 # outside every root
    assert by_name["acme/tiny"].kind == "hf_cache"
    assert len(by_name) == len(found)                     # each name once


def test_a_long_list_is_cut_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(local_models, "MAX_MODELS", 3)
    for i in range(5):
        model_folder(tmp_path / "root" / f"m{i}")
    found, truncated = scan_all([], [tmp_path / "root"], tmp_path / "no-cache")
    assert len(found) == 3 and truncated
