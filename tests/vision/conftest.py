"""Fixtures for the vision tests: the tiny LLaVA and its shapes data, built once per session."""

from __future__ import annotations

import pytest
from run_helpers import use_helper_folders

from typed_config import typed
from tunelab.demos.vision import VisionDemoAssets, ensure_vision_demo_assets

use_helper_folders()


@pytest.fixture(scope="session")
def vision_assets(tmp_path_factory: pytest.TempPathFactory) -> VisionDemoAssets:
    """The tiny vision-language model + generated images (offline, a few seconds)."""
    return ensure_vision_demo_assets(tmp_path_factory.mktemp("vision") / "assets")


@pytest.fixture(scope="session")
def processor(vision_assets):
    from tunelab.worker.families.vision.model import load_processor

    return load_processor(typed({"model_name": str(vision_assets.model_dir)}))
