"""Paths that try to leave the folders tunelab manages, and sending them: shared by the
suite and bench/reliability.py.

Every field that can name a local file or folder gets values that lead outside: `..`
traversal, absolute paths, `~`, `file://` URLs, a NUL byte, symlinks planted inside a
managed folder (to a file, to a folder above one), and — for the fields a library reads
as "a hub id or a local path" — hub-id-shaped names that exist relative to the server's
working folder (which the attacked server has in the canary's folder), plus `json`, the
`datasets` file reader that reads that folder. They go to the start route (all fields)
and the dataset preview (the fields it reads). Delete-with-artifacts is attacked through
run folders swapped for, or holding, links to the outside.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import httpx

from canary import Canary
from harness import start_run, wait_run_ended

PREVIEWED_FIELDS = ("local_datasets", "model_name", "dataset")
LIST_FIELDS = ("local_datasets", "local_eval_datasets")


@dataclass
class Attempt:
    route: str
    field: str
    value: str
    status: int
    error_field: str | None

    @property
    def refused_naming_the_field(self) -> bool:
        # A list field's item may be named by its index (`local_datasets.0`).
        return 400 <= self.status < 500 and (self.error_field or "").split(".")[0] == self.field


def plant_escape_links(home: Path, canary: Canary) -> None:
    """Symlinks inside the managed folders that point at the canary outside."""
    links = {
        home / "datasets" / "escape.jsonl": canary.data_file,
        home / "datasets" / "escape-dir": canary.root,
        home / "datasets" / "escape-model": canary.model_dir,
        home / "outputs" / "escape-ckpt": canary.checkpoint,
        home / "outputs" / "escape-out": canary.victim_dir,
    }
    for link, target in links.items():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)


def _home_relative(target: Path) -> str:
    """`target` written from the user's home: `~/../../tmp/.../outside/x`."""
    return "~/" + os.path.relpath(target, Path.home())


def _escapes(target: Path, via_data: str, via_link: str) -> list[str]:
    """The ways to name `target` outside: relative, absolute, through a root and `..`,
    from `~`, as a file URL, through a planted link; and a value with a NUL byte."""
    return [via_data, str(target), f"{target.parent}/../{target.parent.name}/{target.name}", _home_relative(target),
            f"file://{target}", via_link, f"{target}\x00.txt"]


def attack_table(home: Path, canary: Canary) -> dict[str, list[str]]:
    """For each field, values that lead to the canary (which lies in <home>/../outside and
    is the attacked server's working folder)."""
    data = home / "datasets"
    data_files = _escapes(canary.data_file, "../../outside/canary.jsonl", "escape.jsonl") + [
        "escape-dir/canary.jsonl", f"{data}/../../outside/canary.jsonl"]
    write_dirs = _escapes(canary.victim_dir / "run", "../../outside/victim/run", "escape-out/run") + ["escape-out"]
    return {
        "local_datasets": data_files,
        "local_eval_datasets": data_files,
        "model_name": _escapes(canary.model_dir, f"{data}/../../outside/model", str(data / "escape-model")) + [
            "model", "./model"],
        "tts_codec": _escapes(canary.model_dir, f"{data}/../../outside/model", str(data / "escape-model")) + [
            "model", "./model"],
        # Hub-id-shaped names that are folders in the working folder, and a file reader.
        "dataset": _escapes(canary.root, "../outside", str(data / "escape-dir")) + [
            "run", "run/checkpoint-2", "./run", "json", "text", f"simplecache::file://{canary.data_file}"],
        "resume_from": _escapes(canary.checkpoint, "../../outside/run/checkpoint-2", "escape-ckpt"),
        "output_dir": write_dirs,
        "tensorboard_dir": write_dirs,
        "mlflow_tracking_uri": _escapes(canary.victim_dir / "mlruns", "../../outside/victim/mlruns", "escape-out/mlruns") + [
            f"sqlite:///{canary.victim_dir}/mlflow.db", "sqlite:///escape-out/mlflow.db", f"file:{canary.victim_dir}"],
    }


def _body(make_body: Callable[..., dict[str, Any]], field: str, value: str) -> dict[str, Any]:
    if field in LIST_FIELDS:
        return make_body(max_steps=1, **{field: [value]})
    if field == "dataset":
        return make_body(max_steps=1, dataset=value, local_datasets=[])
    return make_body(max_steps=1, **{field: value})


def send_attacks(client: httpx.Client, make_body: Callable[..., dict[str, Any]],
                 table: dict[str, list[str]]) -> list[Attempt]:
    attempts = []
    for field, values in table.items():
        routes = ["/api/train/start"] + (["/api/datasets/preview"] if field in PREVIEWED_FIELDS else [])
        for value in values:
            for route in routes:
                response = client.post(route, json=_body(make_body, field, value))
                error = (response.json().get("error") or {}) if response.status_code >= 400 else {}
                attempts.append(Attempt(route, field, value, response.status_code, error.get("field")))
    return attempts


@dataclass
class DeleteOutcome:
    swapped_status: int  # deleting a run whose folder became a link to the outside
    swapped_error_field: str | None
    swapped_run_kept: bool
    linked_status: int  # deleting a run whose folder holds links to the outside
    linked_folder_removed: bool


def attack_delete(client: httpx.Client, make_body: Callable[..., dict[str, Any]], canary: Canary) -> DeleteOutcome:
    swapped = wait_run_ended(client, start_run(client, make_body(max_steps=1)))
    with_links = wait_run_ended(client, start_run(client, make_body(max_steps=1)))
    folder = Path(swapped["output_dir"])
    shutil.rmtree(folder)
    folder.symlink_to(canary.victim_dir)
    refused = client.delete(f"/api/runs/{swapped['id']}", params={"delete_artifacts": "true"})
    inside = Path(with_links["output_dir"])
    (inside / "data-link.jsonl").symlink_to(canary.data_file)
    (inside / "victim-link").symlink_to(canary.victim_dir)
    deleted = client.delete(f"/api/runs/{with_links['id']}", params={"delete_artifacts": "true"})
    return DeleteOutcome(
        swapped_status=refused.status_code,
        swapped_error_field=(refused.json().get("error") or {}).get("field"),
        swapped_run_kept=client.get(f"/api/runs/{swapped['id']}").status_code == 200,
        linked_status=deleted.status_code,
        linked_folder_removed=not inside.exists(),
    )
