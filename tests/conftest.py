"""Shared fixtures: a temporary tunelab home per test and the demo assets built once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunelab.demo import DemoAssets, ensure_demo_assets


@pytest.fixture(scope="session")
def demo_assets(tmp_path_factory: pytest.TempPathFactory) -> DemoAssets:
    """The tiny Llama + sample data, built once per test session (offline, ~5 s)."""
    return ensure_demo_assets(tmp_path_factory.mktemp("demo") / "assets")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh TUNELAB_HOME for one test, so runs, tokens and outputs never leak between tests."""
    root = tmp_path / "home"
    root.mkdir()
    monkeypatch.setenv("TUNELAB_HOME", str(root))
    monkeypatch.delenv("TUNELAB_TOKEN", raising=False)
    return root
