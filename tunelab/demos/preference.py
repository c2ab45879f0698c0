"""Preference pairs for the demo model, generated offline: the chosen answer follows a rule
the rejected one breaks, so a short DPO run shows rewards/accuracies and margins rising.

Each prompt gives a colour, a word or two numbers (the demo tokenizer's own vocabulary,
`demo_assets.sample_pairs`); the chosen answer repeats the colour, spells the word
backwards or adds correctly, the rejected one names another colour, leaves the word as
it is, or is off by one. Rows are (prompt, chosen, rejected) strings; `conversational=True`
writes the same pairs as chat messages lists (TRL's conversational preference format).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

from tunelab.demos.assets import COLOURS, WORDS, DemoAssets


def preference_rows(n: int = 96, seed: int = 11) -> list[dict[str, str]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            colour, other = rng.sample(COLOURS, 2)
            rows.append({"prompt": f"Name the colour you were given.\nThe colour is {colour}.",
                         "chosen": f"You gave me {colour}.", "rejected": f"You gave me {other}."})
        elif kind == 1:
            word = rng.choice(WORDS)
            rows.append({"prompt": f"Spell the word backwards.\n{word}",
                         "chosen": f"Backwards it is {word[::-1]}.", "rejected": f"Backwards it is {word}."})
        else:
            a, b = rng.randint(1, 20), rng.randint(1, 20)
            rows.append({"prompt": f"Add the two numbers.\n{a} and {b}",
                         "chosen": f"The sum is {a + b}.", "rejected": f"The sum is {a + b + 1}."})
    return rows


def _as_messages(row: dict[str, str]) -> dict[str, Any]:
    return {"prompt": [{"role": "user", "content": row["prompt"]}],
            "chosen": [{"role": "assistant", "content": row["chosen"]}],
            "rejected": [{"role": "assistant", "content": row["rejected"]}]}


def _unpaired(row: dict[str, str]) -> list[dict[str, Any]]:
    return [{"prompt": row["prompt"], "completion": row["chosen"], "label": True},
            {"prompt": row["prompt"], "completion": row["rejected"], "label": False}]


def write_preference_data(path: Path, n: int = 96, conversational: bool = False, unpaired: bool = False) -> Path:
    """Write the pairs as JSON lines to `path` and return it (`unpaired`: KTO's
    prompt/completion/label rows, one desirable and one undesirable per pair)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written beside and renamed into place: a concurrent demo never reads half a file.
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    with open(partial, "w") as f:
        for row in preference_rows(n):
            for out in (_unpaired(row) if unpaired else [_as_messages(row) if conversational else row]):
                f.write(json.dumps(out) + "\n")
    os.replace(partial, path)
    return path


def preference_demo_config(assets: DemoAssets, objective: str, steps: int) -> Any:
    """The text demo's recipe on the preference pairs (kept with the demo data), with `objective`."""
    from tunelab.demos.recipe import demo_config

    data = assets.data_dir / "preference.jsonl"
    if not data.is_file():
        write_preference_data(data)
    return demo_config(assets, steps=steps, objective=objective, local_datasets=[str(data)],
                       display_name=f"demo ({objective})")


def reward_summary(extras: dict[str, dict[str, list[Any]]]) -> list[str]:
    """Lines for the demo summary: reward margin and accuracy, the first five steps' mean
    against the last five's."""
    lines = []
    for name, label in (("rewards/margins", "margin"), ("rewards/accuracies", "accuracy")):
        values = (extras.get(name) or {}).get("values") or []
        if values:
            head, tail = values[:5], values[-5:]
            lines.append(f"{label + ':':<11} {sum(head) / len(head):.3f} -> {sum(tail) / len(tail):.3f} (mean of the first and last 5 steps)")
    return lines
