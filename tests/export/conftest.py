"""Fixtures for the export tests: real runs trained once per session through the CLI and
shared; each test exports into its own folder, so they do not disturb each other."""

from __future__ import annotations

import pytest

from export_helpers import FOREIGN_FILE, TrainedRun, train_run


@pytest.fixture(scope="session")
def lora_run(tmp_path_factory: pytest.TempPathFactory, demo_assets) -> TrainedRun:
    """A completed 5-step LoRA run, shared by every export test that only reads it. Trained
    with `--export merged`, so its folder also holds the worker's own merged export
    (test_export_after.py); the other tests export elsewhere or replace it."""
    return train_run(tmp_path_factory.mktemp("lora") / "home", demo_assets, ("--export", "merged"), lora_r=8, lora_alpha=16)


@pytest.fixture(scope="session")
def full_run(tmp_path_factory: pytest.TempPathFactory, demo_assets) -> TrainedRun:
    """A completed 2-step full fine-tuning run, whose `export_after: merged` failed (FOREIGN_FILE)."""
    home = tmp_path_factory.mktemp("full") / "home"
    folder = home / "outputs" / "full-run"
    (folder / FOREIGN_FILE).parent.mkdir(parents=True)
    (folder / FOREIGN_FILE).write_text("the user's notes")
    return train_run(home, demo_assets, training_type="full", max_steps=2, learning_rate=1e-3,
                     output_dir=str(folder), export_after="merged")
