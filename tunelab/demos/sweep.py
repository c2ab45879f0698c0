"""`tunelab demo --sweep-file FILE`: the demo's sweep, written as a sweep file to run with
`tunelab sweep FILE`.

The demo model and data live in the tunelab home (built once, offline), so the file is
written with their paths filled in rather than shipped with paths that would not exist.
Eight trials over the learning rate and the LoRA rank, the demo's own recipe otherwise,
eval_loss on a held-out tenth of the data, a median pruner. docs/SWEEPS.md records what
it measured against the demo's default settings on the same steps and holdout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tunelab.demos.assets import DEMO_TRAINING, DemoAssets

DEMO_SWEEP_STEPS = 40
# Halfway and at the end: the pruner judges a trial at step 20. Judged at step 10 (eval every
# 10 steps), trials were pruned on their warm-up, not their promise (docs/SWEEPS.md).
DEMO_SWEEP_EVAL_STEPS = 20
DEMO_SWEEP_HOLDOUT = 0.1


def demo_base(assets: DemoAssets) -> dict[str, Any]:
    """The demo's run settings with eval on the holdout: the sweep's base, and the default run it is measured against."""
    return {"model_name": str(assets.model_dir), "local_datasets": [str(assets.alpaca)], **DEMO_TRAINING,
            "max_steps": DEMO_SWEEP_STEPS, "eval_steps": DEMO_SWEEP_EVAL_STEPS, "eval_holdout": DEMO_SWEEP_HOLDOUT,
            "seed": 3407}


def demo_sweep(assets: DemoAssets) -> dict[str, Any]:
    return {
        "name": "demo-lr-rank",
        "base": demo_base(assets),
        "space": {"learning_rate": {"log_uniform": [1.0e-3, 1.0e-2]}, "lora_r": {"choice": [8, 16, 32, 64]}},
        "objective": {"metric": "eval_loss", "direction": "minimize"},
        "trials": 8,
        "sampler": "tpe",
        "pruner": "median",
        "pruner_startup_trials": 2,
        "seed": 0,
    }


def write_demo_sweep(path: Path, assets: DemoAssets) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# The demo's sweep (tunelab demo --sweep-file); run it with: tunelab sweep " + path.name + "\n"
                    + yaml.safe_dump(demo_sweep(assets), sort_keys=False))
    return path
