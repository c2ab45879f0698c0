"""Fixtures for the MLX backend tests (helpers that run workers live in worker_runs.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module", autouse=True)
def _mlx_without_kernel_compile():
    """MLX's CPU build compiles kernels with g++ on first use (~34 s); with compilation off
    the losses are the same. Spawned workers inherit the variable."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLX_DISABLE_COMPILE", "1")
        yield
