"""Fixtures for the speech tests: the tiny Whisper and its clips spoken by espeak-ng, built once
per session. Without espeak-ng (scripts/install_system_deps.sh installs it) the tests that
need the clips skip, saying how to install it, as the browser tests do without Chromium."""

from __future__ import annotations

import pytest
from run_helpers import built_with_espeak, use_helper_folders

from typed_config import typed
from tunelab.demos.speech import SpeechDemoAssets, ensure_speech_demo_assets

use_helper_folders()


@pytest.fixture(scope="session")
def speech_assets(tmp_path_factory: pytest.TempPathFactory) -> SpeechDemoAssets:
    """The tiny random-init Whisper + clips spoken by espeak-ng (offline, a few seconds)."""
    return built_with_espeak(ensure_speech_demo_assets, tmp_path_factory.mktemp("speech") / "assets")


@pytest.fixture(scope="session")
def speech_processor(speech_assets):
    from tunelab.worker.families.speech.model import load_processor

    return load_processor(typed({"model_name": str(speech_assets.model_dir)}))
