"""Fixtures for the export tests: real runs trained once per session through the CLI and
shared; each test exports into its own folder, so they do not disturb each other."""

from __future__ import annotations

import pytest

from export_helpers import TrainedRun, train_run


@pytest.fixture(scope="session")
def lora_run(tmp_path_factory: pytest.TempPathFactory, demo_assets) -> TrainedRun:
    """A completed 5-step LoRA run, shared by every export test that only reads it."""
    return train_run(tmp_path_factory.mktemp("lora") / "home", demo_assets, lora_r=8, lora_alpha=16)


@pytest.fixture(scope="session")
def full_run(tmp_path_factory: pytest.TempPathFactory, demo_assets) -> TrainedRun:
    """A completed 2-step full fine-tuning run."""
    return train_run(tmp_path_factory.mktemp("full") / "home", demo_assets, training_type="full", max_steps=2, learning_rate=1e-3)
