"""Fixtures for the worker's own tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def data_cache(tmp_path: Path) -> Path:
    """The folder `datasets` writes its caches to, as a run's own folder would be."""
    return tmp_path / "datasets-cache"
