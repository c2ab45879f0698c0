"""The GRPO demo: prompts with a checkable answer for the demo model, generated offline,
and built-in rewards a tiny random model can learn to earn within a few minutes on CPU.

Each prompt names a colour and asks for it back (`The colour is red.` -> `red`); the
`reference` column holds the answer. The rewards are `regex` (any colour word appears: a
format check the random model already meets about one time in five, so every group of
completions has some to learn from) and `contains` (the right colour appears), each worth
1. The demo trains every weight of the tiny model (training_type full): GRPO's signal is
sparse, and a LoRA adapter, which cannot reach the output head TRL reads log-probabilities
from, learns it several times slower. The mean reward starts near 0.25 and climbs past 1
within about 30 steps; `tunelab demo --method grpo` prints it at the start against the end.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

from tunelab.demos.assets import COLOURS, DemoAssets

DEMO_REWARDS = [{"name": "regex", "pattern": "|".join(COLOURS), "weight": 1.0}, {"name": "contains", "weight": 1.0}]
# Completions per prompt and their length: enough spread in each group to learn from,
# short enough that a step takes seconds on two CPU cores.
DEMO_GENERATION = {"num_generations": 8, "max_completion_length": 16, "temperature": 1.0}


def prompt_rows(n: int = 64, seed: int = 7) -> list[dict[str, str]]:
    rng = random.Random(seed)
    return [{"prompt": f"Name the colour you were given.\nThe colour is {colour}.", "reference": colour}
            for colour in (rng.choice(COLOURS) for _ in range(n))]


def write_prompt_data(path: Path, n: int = 64, conversational: bool = False) -> Path:
    """The prompts as JSON lines at `path` (`conversational`: each prompt a chat messages list)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")  # renamed into place: never read half-written
    with open(partial, "w") as f:
        for row in prompt_rows(n):
            if conversational:
                row = {"prompt": [{"role": "user", "content": row["prompt"]}], "answer": row["reference"]}
            f.write(json.dumps(row) + "\n")
    os.replace(partial, path)
    return path


def grpo_demo_config(assets: DemoAssets, steps: int, **overrides: Any) -> Any:
    """The text demo's recipe on the colour prompts, with objective grpo, the demo rewards and full fine-tuning."""
    from tunelab.demos.recipe import demo_config

    data = assets.data_dir / "grpo_prompts.jsonl"
    if not data.is_file():
        write_prompt_data(data)
    settings = {"objective": "grpo", "rewards": DEMO_REWARDS, **DEMO_GENERATION, "training_type": "full", "batch_size": 16,
                "gradient_accumulation_steps": 1, "learning_rate": 2e-3, "warmup_steps": 0,
                "local_datasets": [str(data)], "display_name": "demo (grpo)", **overrides}
    return demo_config(assets, steps=steps, **settings)


def reward_summary(extras: dict[str, dict[str, list[Any]]]) -> list[str]:
    """Demo summary lines: the mean reward (and each reward's), first five steps against the last five."""
    lines = []
    names = ["reward"] + sorted(n for n in extras if n.startswith("rewards/") and n.endswith("/mean"))
    for name in names:
        values = (extras.get(name) or {}).get("values") or []
        if values:
            head, tail = values[:5], values[-5:]
            label = "reward:" if name == "reward" else name.removeprefix("rewards/").removesuffix("/mean") + ":"
            lines.append(f"{label:<11} {sum(head) / len(head):.3f} -> {sum(tail) / len(tail):.3f} (mean of the first and last 5 steps)")
    return lines
