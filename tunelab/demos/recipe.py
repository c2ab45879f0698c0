"""The text demo's recipe: the tiny model, the alpaca sample and the settings every demo on
that model starts from (the sft demo, and the preference and GRPO demos that change its data
and objective)."""

from __future__ import annotations

from tunelab.config.run_config import RunConfig, parse_config
from tunelab.demos.assets import DEMO_TRAINING, DemoAssets


def demo_config(assets: DemoAssets, *, backend: str = "torch", steps: int = 60, **overrides) -> RunConfig:
    """A LoRA run on the alpaca sample that visibly learns within a minute on 2 CPU cores."""
    return parse_config({
        "model_name": str(assets.model_dir),
        "local_datasets": [str(assets.alpaca)],
        **DEMO_TRAINING,
        "backend": backend,
        "max_steps": steps,
        "display_name": f"demo ({backend})",
        **overrides,
    })
