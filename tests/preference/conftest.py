"""Fixtures for the preference tests: the demo preference pairs (strings and messages lists)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The run tests drive the worker tests' spawned-worker helper.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "worker"))

from tunelab.demos.preference import write_preference_data


@pytest.fixture(scope="session")
def preference_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_preference_data(tmp_path_factory.mktemp("preference") / "pairs.jsonl")


@pytest.fixture(scope="session")
def preference_messages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_preference_data(tmp_path_factory.mktemp("preference") / "messages.jsonl", conversational=True)


@pytest.fixture(scope="session")
def unpaired_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_preference_data(tmp_path_factory.mktemp("preference") / "unpaired.jsonl", unpaired=True)
