"""Fixtures for the speech tests: the tiny Whisper and its tone clips, built once per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The end-to-end tests share the orchestrator tests' event recorder and the worker tests'
# spawned-worker driver.
for _folder in ("orchestrator", "worker"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / _folder))

from tunelab.speech_demo import SpeechDemoAssets, ensure_speech_demo_assets


@pytest.fixture(scope="session")
def speech_assets(tmp_path_factory: pytest.TempPathFactory) -> SpeechDemoAssets:
    """The tiny random-init Whisper + generated tone clips (offline, a few seconds)."""
    return ensure_speech_demo_assets(tmp_path_factory.mktemp("speech") / "assets")


@pytest.fixture(scope="session")
def speech_processor(speech_assets):
    from tunelab.worker.speech_model import load_processor

    return load_processor({"model_name": str(speech_assets.model_dir)})
