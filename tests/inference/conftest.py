"""Fixtures for the inference tests: one real LoRA run per test session, shared by every
test that only talks to it, and its reference model loaded once in the test process."""

from __future__ import annotations

import pytest

from inference_helpers import Reference, TrainedRun, train_lora_run


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory, demo_assets) -> TrainedRun:
    return train_lora_run(tmp_path_factory.mktemp("inference") / "home", demo_assets)


@pytest.fixture(scope="session")
def reference(trained) -> Reference:
    return Reference(trained)
