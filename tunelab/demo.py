"""`tunelab demo`: fine-tune the built-in tiny model end to end through the orchestrator."""

from __future__ import annotations

from tunelab.demo_assets import DemoAssets, build_demo_assets, ensure_demo_assets

__all__ = ["DemoAssets", "build_demo_assets", "ensure_demo_assets"]
