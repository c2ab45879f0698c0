"""Fixtures for the audio chat tests: the tiny Qwen2-Audio and its spoken-number chats, built
once per session. The clips are spoken by espeak-ng; without it (scripts/install_system_deps.sh
installs it) the tests that need them skip, saying how to install it, as the speech tests do."""

from __future__ import annotations

import pytest
from run_helpers import built_with_espeak, use_helper_folders

from typed_config import typed
from tunelab.demos.audio_chat import AudioChatDemoAssets, ensure_audio_chat_demo_assets

use_helper_folders()


@pytest.fixture(scope="session")
def audio_chat_assets(tmp_path_factory: pytest.TempPathFactory) -> AudioChatDemoAssets:
    """The tiny random-init Qwen2-Audio + chats about clips spoken by espeak-ng (offline, seconds)."""
    return built_with_espeak(ensure_audio_chat_demo_assets, tmp_path_factory.mktemp("audio-chat") / "assets")


@pytest.fixture(scope="session")
def audio_processor(audio_chat_assets):
    from tunelab.worker.families.audio_chat.model import load_processor

    return load_processor(typed({"model_name": str(audio_chat_assets.model_dir)}))
