"""Preference rows shaped exactly as public datasets and TRL's documentation ship them,
written to files the way their sources publish them (LLaMA-Factory: one JSON array)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tunelab.demos.preference import preference_rows

# TRL's documented shapes (its "Dataset formats" page), one pair each.
STANDARD_EXPLICIT = {"prompt": "The sky is", "chosen": " blue.", "rejected": " green."}
STANDARD_IMPLICIT = {"chosen": "The sky is blue.", "rejected": "The sky is green."}
CONVERSATIONAL_EXPLICIT = {
    "prompt": [{"role": "user", "content": "What color is the sky?"}],
    "chosen": [{"role": "assistant", "content": "It is blue."}],
    "rejected": [{"role": "assistant", "content": "It is green."}],
}
CONVERSATIONAL_IMPLICIT = {
    "chosen": [{"role": "user", "content": "What color is the sky?"}, {"role": "assistant", "content": "It is blue."}],
    "rejected": [{"role": "user", "content": "What color is the sky?"}, {"role": "assistant", "content": "It is green."}],
}
UNPAIRED_STANDARD = {"prompt": "The sky is", "completion": " blue.", "label": True}
UNPAIRED_CONVERSATIONAL = {
    "prompt": [{"role": "user", "content": "What color is the sky?"}],
    "completion": [{"role": "assistant", "content": "It is green."}],
    "label": False,
}


def ultrafeedback_row(question: str = "How many legs does a spider have?", good: str = "A spider has eight legs.",
                      bad: str = "Six.", index: int = 0) -> dict[str, Any]:
    """A row of HuggingFaceH4/ultrafeedback_binarized: the prompt as text, chosen/rejected as
    whole conversations opening with it, `messages` (the chosen conversation) and scores."""
    user = {"content": question, "role": "user"}
    chosen = [user, {"content": good, "role": "assistant"}]
    return {"prompt": question, "prompt_id": f"{index:064x}", "chosen": chosen,
            "rejected": [user, {"content": bad, "role": "assistant"}], "messages": chosen,
            "score_chosen": 8.5, "score_rejected": 3.0}


def llamafactory_dpo_row(question: str = "What is 2 + 2?", good: str = "4", bad: str = "5") -> dict[str, Any]:
    """A row of LLaMA-Factory's data/dpo_en_demo.json (sharegpt, ranking)."""
    return {"conversations": [{"from": "human", "value": question}],
            "chosen": {"from": "gpt", "value": good}, "rejected": {"from": "gpt", "value": bad}}


def llamafactory_kto_row(question: str = "What is 2 + 2?", answer: str = "4", label: bool = True) -> dict[str, Any]:
    """A row of LLaMA-Factory's data/kto_en_demo.json (sharegpt columns messages + kto_tag label)."""
    return {"messages": [{"content": question, "role": "user"}, {"content": answer, "role": "assistant"}], "label": label}


def demo_llamafactory_dpo(n: int = 24) -> list[dict[str, Any]]:
    """The demo model's preference pairs in LLaMA-Factory's DPO shape (its vocabulary)."""
    return [llamafactory_dpo_row(r["prompt"], r["chosen"], r["rejected"]) for r in preference_rows(n)]


def demo_llamafactory_kto(n: int = 12) -> list[dict[str, Any]]:
    rows = []
    for r in preference_rows(n):
        rows += [llamafactory_kto_row(r["prompt"], r["chosen"], True), llamafactory_kto_row(r["prompt"], r["rejected"], False)]
    return rows


def write_json_array(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(rows, indent=2, ensure_ascii=False))
    return path


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path
