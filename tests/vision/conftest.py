"""Fixtures for the vision tests: the tiny LLaVA and its shapes data, built once per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The end-to-end tests share the orchestrator tests' event recorder and the worker tests'
# spawned-worker driver.
for _folder in ("orchestrator", "worker"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / _folder))

from tunelab.vision_demo import VisionDemoAssets, ensure_vision_demo_assets


@pytest.fixture(scope="session")
def vision_assets(tmp_path_factory: pytest.TempPathFactory) -> VisionDemoAssets:
    """The tiny vision-language model + generated images (offline, a few seconds)."""
    return ensure_vision_demo_assets(tmp_path_factory.mktemp("vision") / "assets")


@pytest.fixture(scope="session")
def processor(vision_assets):
    from tunelab.worker.vision_model import load_processor

    return load_processor({"model_name": str(vision_assets.model_dir)})
