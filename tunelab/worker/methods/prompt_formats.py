"""The prompt-only data shape GRPO trains on, recognised by its columns.

  prompt_only  a `prompt` column (a string, or a chat messages list of role/content or
               sharegpt from/value turns) and optionally a reference answer, under
               `reference`, `answer` or `solution` (the exact_match and contains rewards
               compare completions with it; a user's reward function gets every column).
Other names map through `column_mapping`, e.g. {prompt: question, reference: answer}.
A dataset with completions or chosen/rejected answers is not prompt-only (SFT or
preference data). Torch-free (`formats.detect_format` asks this module).
"""

from __future__ import annotations

from typing import Any

PROMPT_FORMAT = "prompt_only"
REFERENCE_COLUMNS = ("reference", "answer", "solution")
# Columns that mark a dataset as something else that happens to have a prompt.
NOT_PROMPT_ONLY = ("completion", "chosen", "rejected", "output", "response")
EXAMPLE_ROW = {"prompt": "What is 2 + 3? Answer with the number.", "answer": "5"}


def is_prompt_only(columns: list[str]) -> bool:
    return "prompt" in columns and not any(c in columns for c in NOT_PROMPT_ONLY)


def reference_column(columns: list[str]) -> str | None:
    return next((c for c in REFERENCE_COLUMNS if c in columns), None)


def describe_shape() -> str:
    return (f"for objective grpo a prompt column (strings or chat messages) with an optional reference answer column "
            f"({'/'.join(REFERENCE_COLUMNS)}) = prompt_only, e.g. {EXAMPLE_ROW}")


def prompt_row(row: dict[str, Any], reference: str | None, role_mapping: dict[str, str] | None = None) -> dict[str, Any]:
    """A row as TRL's conversational prompt-only row: a string prompt becomes one user turn,
    a messages list keeps its turns; the reference answer (if any) under `reference`, and
    every other column as it is (a user's reward function receives them)."""
    from tunelab.worker.methods.preference_rows import prompt_turns

    out = {k: v for k, v in row.items() if k != "prompt" and k != reference}
    out["prompt"] = prompt_turns(row["prompt"], role_mapping)
    if reference is not None:
        value = row[reference]
        out["reference"] = "" if value is None else str(value)
    return out
