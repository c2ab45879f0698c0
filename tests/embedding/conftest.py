"""Fixtures for the embedding tests: the tiny encoder and its query/passage data, built once per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The end-to-end tests share the orchestrator tests' event recorder and the worker tests'
# spawned-worker driver.
for _folder in ("orchestrator", "worker"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / _folder))

from tunelab.demos.embedding import EmbeddingDemoAssets, ensure_embedding_demo_assets


@pytest.fixture(scope="session")
def embedding_assets(tmp_path_factory: pytest.TempPathFactory) -> EmbeddingDemoAssets:
    """The tiny BERT-style encoder (a sentence-transformers folder and a plain one) + generated pairs."""
    return ensure_embedding_demo_assets(tmp_path_factory.mktemp("embedding") / "assets")
