"""The preference data shapes (DPO, ORPO, SimPO, KTO), recognised by their columns.

  preference  chosen and rejected, with the prompt given or implicit; every shape TRL
              documents and those peers ship:
              - explicit prompt: prompt, chosen, rejected as strings (standard) or as
                {"role", "content"} turn lists (conversational);
              - implicit prompt: no prompt column, chosen and rejected share their
                opening (turns, or text for strings) and TRL takes that as the prompt;
              - UltraFeedback (`HuggingFaceH4/ultrafeedback_binarized`): a plain-text
                prompt and chosen/rejected as whole conversations that start with it
                (TRL ignores the string prompt and takes the shared turns; score
                columns are not read);
              - LLaMA-Factory (`dpo_en_demo.json`): a sharegpt `conversations` list of
                {"from", "value"} turns as the prompt, chosen/rejected as single turn
                objects.
  unpaired_preference  what KTO reads: prompt, completion, label (true = a desirable
              completion), or LLaMA-Factory's `kto_en_demo.json`: a `messages` list whose
              last (assistant) turn is the completion, and a boolean label. KTO also
              reads paired rows (TRL splits each into a desirable and an undesirable row).
Columns are matched after `column_mapping` (e.g. {prompt: question, chosen: good,
rejected: bad}). Rows become TRL's conversational rows in `preference_rows`.
Torch-free (`formats.detect_format` asks this module).
"""

from __future__ import annotations

from typing import Any

from tunelab.worker.data.rows import conversation_column  # LLaMA-Factory's files keep the prompt there

PREFERENCE_FORMAT = "preference"
UNPAIRED_FORMAT = "unpaired_preference"
PREFERENCE_COLUMNS = ("prompt", "chosen", "rejected")
UNPAIRED_COLUMNS = ("prompt", "completion", "label")
EXAMPLE_ROW = {"prompt": "What is the capital of France?", "chosen": "Paris.", "rejected": "Lyon."}
UNPAIRED_EXAMPLE = {"prompt": "What is the capital of France?", "completion": "Lyon.", "label": False}


def is_preference(columns: list[str]) -> bool:
    return "chosen" in columns and "rejected" in columns


def is_unpaired(columns: list[str], sample_rows: list[dict[str, Any]]) -> bool:
    """prompt/completion/label, or a conversation with a true/false label (LLaMA-Factory's
    KTO files). The label must be a real boolean there, so chat data that merely carries a
    numeric or text `label` column stays chat data."""
    if all(c in columns for c in UNPAIRED_COLUMNS):
        return True
    if "label" not in columns or "completion" in columns or not conversation_column(columns):
        return False
    labels = [row.get("label") for row in sample_rows if row.get("label") is not None]
    return bool(labels) and all(isinstance(label, bool) for label in labels)


def missing_columns(columns: list[str], sample_rows: list[dict[str, Any]]) -> list[str]:
    """The preference columns these columns lack. The prompt may be left out where the
    chosen/rejected answers are conversations, where a conversation column holds it, or
    where string answers share their opening text (TRL's implicit prompt)."""
    missing = [c for c in ("chosen", "rejected") if c not in columns]
    if "prompt" in columns or missing or conversation_column(columns):
        return missing
    if any(isinstance(row.get("chosen"), (list, dict)) for row in sample_rows):
        return missing
    shared = [_shares_opening(row.get("chosen"), row.get("rejected")) for row in sample_rows]
    return missing if shared and all(shared) else ["prompt"]


def _shares_opening(chosen: Any, rejected: Any) -> bool:
    return isinstance(chosen, str) and isinstance(rejected, str) and bool(chosen) and bool(rejected) and chosen[0] == rejected[0]


def missing_unpaired_columns(columns: list[str]) -> list[str]:
    if "label" in columns and "completion" not in columns and conversation_column(columns):
        return []
    return [c for c in UNPAIRED_COLUMNS if c not in columns]


def describe_shape() -> str:
    return (f"(prompt, chosen, rejected) = preference, e.g. {EXAMPLE_ROW} (strings or role/content turn lists; without "
            "a prompt when chosen/rejected are whole conversations sharing their opening turns; LLaMA-Factory's "
            "conversations + chosen/rejected turn objects); for kto also (prompt, completion, label) = "
            f"unpaired_preference, e.g. {UNPAIRED_EXAMPLE}, or LLaMA-Factory's messages + boolean label")
