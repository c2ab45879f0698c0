"""The models this server can already train from, for the page's Model picker.

Four sources, in this order:
  demo     the built demo model (a model folder whose asset folder is marked READY)
  run      finished runs whose folder holds a whole model (full fine-tunes, or a merged
           export in `export-merged`, `run-<id>-export-merged` for a resumed run), to
           continue training from
  folder   other model folders inside the data roots (`paths.data_roots`)
  hf_cache models in the local Hugging Face cache (`models--org--name` folders with a
           `config.json` in a snapshot), named by their hub id, which loads them from the cache

A model folder is one holding `config.json` and a whole model's weights. The scan is
bounded — a few levels below each root, a fixed number of folders looked at, a fixed
number of answers — so a huge data root costs a page load milliseconds, not minutes.
Symlinks are never followed inside the data roots, hidden folders (caches, half-built
demos) are skipped, and every folder named lies inside a data root: the answer tells
the token holder nothing the dataset and run routes would not. Hugging Face cache
entries are named by hub id only, never by their path. Torch-free.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

from tunelab import paths
from tunelab.checkpoints import CHECKPOINT_NAME

# Levels below a data root looked into (outputs/<run>/export-merged is 2).
MAX_DEPTH = 3
# Folders looked at in one scan of the data roots, and of the Hugging Face cache.
MAX_FOLDERS = 2000
MAX_HF_ENTRIES = 500
# Snapshots of one cached model looked at for a config.json.
MAX_SNAPSHOTS = 5
# Answers in all; the page's list is for picking, typing still reaches anything else.
MAX_MODELS = 200
# Finished runs looked at, newest first.
MAX_RUNS = 200
# Files that mean a whole model (not an adapter) lies in a folder.
FULL_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
DEMO_MARK = "READY"


@dataclass(frozen=True)
class LocalModel:
    name: str    # what goes in model_name: a folder path, or a hub id for cached models
    kind: str    # demo | run | folder | hf_cache
    label: str   # what a person reads beside it

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def is_model_folder(folder: Path) -> bool:
    """`config.json` and whole-model weights, as plain files (not links out of the folder)."""
    def plain(name: str) -> bool:
        return _is_file(folder / name) and not (folder / name).is_symlink()

    return plain("config.json") and any(plain(name) for name in FULL_WEIGHTS)


def hf_hub_cache() -> Path:
    """Where huggingface_hub keeps downloads: HF_HUB_CACHE (or its old name
    HUGGINGFACE_HUB_CACHE), else HF_HOME/hub, else $XDG_CACHE_HOME or ~/.cache, /huggingface/hub."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(name):
            return Path(os.environ[name]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(cache).expanduser() / "huggingface" / "hub"


def hub_id(folder_name: str) -> str | None:
    """`models--org--name` -> `org/name` (`models--gpt2` -> `gpt2`); None for anything else."""
    if not folder_name.startswith("models--"):
        return None
    parts = folder_name[len("models--"):].split("--")
    if not all(parts) or len(parts) > 2:
        return None
    return "/".join(parts)


def scan_hf_cache(cache: Path | None = None, limit: int = MAX_MODELS) -> list[LocalModel]:
    """The cached models with a config.json in one of their snapshots, by hub id."""
    cache = cache or hf_hub_cache()
    found: list[LocalModel] = []
    try:
        entries = sorted(os.scandir(cache), key=lambda e: e.name)[:MAX_HF_ENTRIES]
    except (OSError, ValueError):
        return found
    for entry in entries:
        name = hub_id(entry.name)
        if name is None or not entry.is_dir(follow_symlinks=False):
            continue
        if _has_snapshot_config(Path(entry.path) / "snapshots"):
            found.append(LocalModel(name, "hf_cache", "Hugging Face cache"))
            if len(found) >= limit:
                break
    return found


def _has_snapshot_config(snapshots: Path) -> bool:
    try:
        revisions = sorted(os.scandir(snapshots), key=lambda e: e.name)[:MAX_SNAPSHOTS]
    except (OSError, ValueError):
        return False
    # The cache's own files are links into blobs/, so here links are followed.
    return any(_is_file(Path(rev.path) / "config.json") for rev in revisions)


def scan_roots(roots: Iterable[Path], max_depth: int = MAX_DEPTH, max_folders: int = MAX_FOLDERS,
               limit: int = MAX_MODELS) -> list[LocalModel]:
    """Model folders inside `roots`, breadth first, at most `max_depth` levels down."""
    found: list[LocalModel] = []
    seen: set[str] = set()
    budget = max_folders
    queue: list[tuple[Path, Path, int]] = [(Path(os.path.realpath(root)), Path(os.path.realpath(root)), 0) for root in roots]
    while queue and budget > 0 and len(found) < limit:
        folder, root, depth = queue.pop(0)
        budget -= 1
        key = str(folder)
        if key in seen:
            continue
        seen.add(key)
        if depth > 0 and is_model_folder(folder):
            found.append(_folder_entry(folder))
            continue  # a model's own subfolders are not models of their own
        if depth >= max_depth:
            continue
        try:
            children = sorted((e for e in os.scandir(folder) if _worth_entering(e)), key=lambda e: e.name)
        except (OSError, ValueError):
            continue
        queue.extend((Path(child.path), root, depth + 1) for child in children)
    return found


def _worth_entering(entry: os.DirEntry) -> bool:
    # Hidden folders hold caches and half-built demos; checkpoints are resumed, not started from.
    try:
        return (entry.is_dir(follow_symlinks=False) and not entry.name.startswith(".")
                and not CHECKPOINT_NAME.fullmatch(entry.name))
    except OSError:
        return False


def _folder_entry(folder: Path) -> LocalModel:
    if _is_file(folder.parent / DEMO_MARK) and folder.name == "model":
        return LocalModel(str(folder), "demo", f"demo model ({folder.parent.name})")
    return LocalModel(str(folder), "folder", "model folder")


def finished_runs(runs: Iterable[dict[str, Any]], roots: list[Path]) -> list[LocalModel]:
    """Completed runs whose folder (or merged export) is a whole model inside a data root."""
    # Imported when first asked, not with the server (whose start-up is timed); planning is torch-free.
    from tunelab.export.plan import export_folder_name

    found = []
    for run in runs:
        if run.get("status") != "completed" or not run.get("output_dir"):
            continue
        name = run.get("display_name") or f"run #{run['id']}"
        merged_export = Path(run["output_dir"]) / export_folder_name(run, "merged")
        for folder in (Path(run["output_dir"]), merged_export):
            if any(paths.is_within(folder, root) for root in roots) and is_model_folder(folder):
                merged = " (merged export)" if folder == merged_export else ""
                found.append(LocalModel(str(Path(os.path.realpath(folder))), "run", f"{name}{merged}: continue from it"))
                break
    return found


def local_models(runs: Iterable[dict[str, Any]], roots: list[Path] | None = None,
                 hf_cache: Path | None = None) -> tuple[list[LocalModel], bool]:
    """Every source above, each name once, and whether the list was cut at MAX_MODELS."""
    roots = paths.data_roots() if roots is None else roots
    folders = scan_roots(roots)
    runs_found = finished_runs(runs, roots)
    demos = [m for m in folders if m.kind == "demo"]
    ordered = demos + runs_found + [m for m in folders if m.kind != "demo"] + scan_hf_cache(hf_cache)
    answer: list[LocalModel] = []
    names: set[str] = set()
    for model in ordered:
        if model.name not in names:
            names.add(model.name)
            answer.append(model)
    return answer[:MAX_MODELS], len(answer) > MAX_MODELS
