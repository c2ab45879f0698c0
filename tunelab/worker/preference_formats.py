"""The preference data shape (DPO, ORPO, SimPO), recognised by its columns.

  preference  prompt, chosen, rejected: strings, or chat messages lists
              ({"role", "content"} turns, TRL's conversational preference format). With
              messages lists the prompt column may be left out when `chosen` and
              `rejected` are whole conversations sharing their opening turns (TRL then
              takes the shared turns as the prompt).
Columns are matched after `column_mapping` (e.g. {prompt: question, chosen: good,
rejected: bad}). Torch-free (`formats.detect_format` asks this module).
"""

from __future__ import annotations

from typing import Any

PREFERENCE_FORMAT = "preference"
PREFERENCE_COLUMNS = ("prompt", "chosen", "rejected")
EXAMPLE_ROW = {"prompt": "What is the capital of France?", "chosen": "Paris.", "rejected": "Lyon."}


def is_preference(columns: list[str]) -> bool:
    return "chosen" in columns and "rejected" in columns


def missing_columns(columns: list[str], sample_rows: list[dict[str, Any]]) -> list[str]:
    """The canonical preference columns these columns lack; the prompt is optional only
    where chosen/rejected are messages lists (TRL's implicit prompt)."""
    missing = [c for c in ("chosen", "rejected") if c not in columns]
    if "prompt" not in columns and not _conversational(sample_rows):
        missing.insert(0, "prompt")
    return missing


def _conversational(rows: list[dict[str, Any]]) -> bool:
    return any(isinstance(row.get("chosen"), list) for row in rows)


def describe_shape() -> str:
    return f"(prompt, chosen, rejected) = preference, e.g. {EXAMPLE_ROW}"
