"""`export_after` (`tunelab train --export merged`): the training worker exports the run
as it completes, in its own process. What it writes must be exactly what a separate
`tunelab export` writes; an export that fails must leave the run completed, saying why."""

from __future__ import annotations

import json

import pytest

from export_helpers import FOREIGN_FILE, run_cli

pytestmark = pytest.mark.slow


def test_the_worker_writes_the_merged_export_tunelab_export_would(lora_run):
    folder = lora_run.output_dir / "export-merged"
    assert f"; exported merged to {folder}\n" in lora_run.output, lora_run.output
    mine = json.loads((folder / "tunelab-export.json").read_text())
    assert (mine["run_id"], mine["format"], mine["dtype"], mine["kind"]) == (lora_run.run_id, "merged", "float16", "adapter")

    dest = lora_run.outputs_root / "merged-by-the-child"
    done = run_cli(["export", lora_run.run_id, "--format", "merged", "--dest", dest], lora_run.home)
    assert done.returncode == 0, done.stdout + done.stderr
    theirs = json.loads((dest / "tunelab-export.json").read_text())
    assert {k: v for k, v in mine.items() if k not in ("dest", "created_at")} == \
           {k: v for k, v in theirs.items() if k not in ("dest", "created_at")}
    # Byte for byte: weights, config, tokenizer; only the manifest names its own folder and time.
    for name in mine["files"]:
        assert (folder / name).read_bytes() == (dest / name).read_bytes(), name
    assert not list(lora_run.output_dir.glob(".export-partial-*"))


def test_an_export_that_fails_leaves_the_run_completed_and_says_why(full_run):
    assert full_run.run["status"] == "completed"
    message = next(line for line in full_run.output.splitlines() if line.startswith("completed 2 steps"))
    assert "; merged export failed: " in message and "already holds other files" in message, full_run.output
    assert (full_run.output_dir / "model.safetensors").is_file()  # the run's weights are there
    assert (full_run.output_dir / FOREIGN_FILE).read_text() == "the user's notes"
    assert not (full_run.output_dir / "export-merged" / "tunelab-export.json").exists()
