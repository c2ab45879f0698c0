"""Shared fixtures: a temporary tunelab home per test and the demo assets built once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from store_backends import pg_cluster, store_url  # noqa: F401  (fixtures: the store suite on SQLite and PostgreSQL)
from tunelab.demos.text import DemoAssets, ensure_demo_assets

# One torch thread per process in the tests (inherited by every worker child): `make test`
# runs two test processes on two cores, each often with a training child beside it, and
# torch's default of a thread per core then oversubscribes the CPU — its OpenMP threads wait
# on each other, and steps measured 15-20x slower under that contention. Set before any test
# imports torch; a value the caller set wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with an end-to-end (`slow`) test first, each file's tests kept together and in
    order. `make test` hands whole files to two processes as they free up
    (`--dist loadfile --no-loadscope-reorder`); longest first leaves the many quick files to
    even out the end. (xdist's default order, most tests per file first, ran the one-test
    end-to-end files — a minute or more each — last, one process busy while the other idled.)"""
    slow_files = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow_files)  # stable: order within kept


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
    monkeypatch.delenv("TUNELAB_DATABASE_URL", raising=False)
    return root
