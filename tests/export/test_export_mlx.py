"""Export of an MLX run: its adapter is copied in mlx-lm's layout and loads with
`mlx_lm.load(..., adapter_path=)`; merging it is refused with a pointer to mlx_lm.fuse."""

from __future__ import annotations

import pytest

pytest.importorskip("mlx.core", reason="MLX is not installed (pip install -e '.[mlx]')")

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
from mlx_lm import load  # noqa: E402

from export_helpers import PROMPT, run_cli, train_run  # noqa: E402

pytestmark = [pytest.mark.mlx, pytest.mark.slow]


def mlx_logits(demo_assets, adapter_path=None) -> np.ndarray:
    model, tokenizer = load(str(demo_assets.model_dir), adapter_path=str(adapter_path) if adapter_path else None)
    ids = mx.array([tokenizer.encode(PROMPT)])
    return np.array(model(ids).astype(mx.float32))


def test_mlx_adapter_is_exported_and_merging_is_refused(tmp_path, demo_assets):
    trained = train_run(tmp_path / "home", demo_assets, backend="mlx", max_steps=3, lora_r=8, lora_alpha=16)
    result = run_cli(["export", trained.run_id], trained.home)
    assert result.returncode == 0, result.stdout + result.stderr
    dest = trained.output_dir / "export-adapter"
    assert {"adapters.safetensors", "adapter_config.json", "tokenizer.json"} <= {p.name for p in dest.iterdir()}

    exported = mlx_logits(demo_assets, dest)
    np.testing.assert_array_equal(exported, mlx_logits(demo_assets, trained.output_dir))
    assert np.abs(exported - mlx_logits(demo_assets)).max() > 1e-2

    for fmt in ("merged", "gguf"):
        refusal = run_cli(["export", trained.run_id, "--format", fmt], trained.home)
        assert refusal.returncode == 2, refusal.stdout + refusal.stderr
        flat = " ".join(refusal.stderr.split())
        assert "--format" in flat and "mlx_lm.fuse" in flat
        assert not (trained.output_dir / f"export-{fmt}").exists()
