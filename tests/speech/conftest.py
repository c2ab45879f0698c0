"""Fixtures for the speech tests: the tiny Whisper and its clips spoken by espeak-ng, built once
per session. Without espeak-ng (scripts/install_system_deps.sh installs it) the tests that
need the clips skip, saying how to install it, as the browser tests do without Chromium."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The end-to-end tests share the orchestrator tests' event recorder and the worker tests'
# spawned-worker driver.
for _folder in ("orchestrator", "worker"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / _folder))

from tunelab.speech_demo import MissingSynthesiser, SpeechDemoAssets, espeak_binary, ensure_speech_demo_assets


@pytest.fixture(scope="session")
def speech_assets(tmp_path_factory: pytest.TempPathFactory) -> SpeechDemoAssets:
    """The tiny random-init Whisper + clips spoken by espeak-ng (offline, a few seconds)."""
    try:
        espeak_binary()
    except MissingSynthesiser as exc:
        pytest.skip(str(exc))
    return ensure_speech_demo_assets(tmp_path_factory.mktemp("speech") / "assets")


@pytest.fixture(scope="session")
def speech_processor(speech_assets):
    from tunelab.worker.speech_model import load_processor

    return load_processor({"model_name": str(speech_assets.model_dir)})
