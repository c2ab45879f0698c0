"""The preference data shape (DPO, ORPO, SimPO), recognised by its columns.

  preference  prompt, chosen, rejected: strings, or chat messages lists
              ({"role", "content"} turns, TRL's conversational preference format). With
              messages lists the prompt column may be left out when `chosen` and
              `rejected` are whole conversations sharing their opening turns (TRL then
              takes the shared turns as the prompt).
  unpaired_preference  prompt, completion, label (true = a desirable completion): what
              KTO reads (it also reads paired rows, which TRL splits into one desirable
              and one undesirable row each).
Columns are matched after `column_mapping` (e.g. {prompt: question, chosen: good,
rejected: bad}). Torch-free (`formats.detect_format` asks this module).
"""

from __future__ import annotations

from typing import Any

PREFERENCE_FORMAT = "preference"
UNPAIRED_FORMAT = "unpaired_preference"
PREFERENCE_COLUMNS = ("prompt", "chosen", "rejected")
UNPAIRED_COLUMNS = ("prompt", "completion", "label")
EXAMPLE_ROW = {"prompt": "What is the capital of France?", "chosen": "Paris.", "rejected": "Lyon."}
UNPAIRED_EXAMPLE = {"prompt": "What is the capital of France?", "completion": "Lyon.", "label": False}


def is_preference(columns: list[str]) -> bool:
    return "chosen" in columns and "rejected" in columns


def is_unpaired(columns: list[str]) -> bool:
    return all(c in columns for c in UNPAIRED_COLUMNS)


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
    return (f"(prompt, chosen, rejected) = preference, e.g. {EXAMPLE_ROW}; for kto also "
            f"(prompt, completion, label) = unpaired_preference, e.g. {UNPAIRED_EXAMPLE}")


def row_turns(row: dict[str, Any], role_mapping: dict[str, str] | None = None) -> dict[str, list[dict[str, str]]]:
    """A row as TRL's conversational preference row: string cells become one user turn
    (prompt) or one assistant turn (chosen, rejected); messages lists keep their turns,
    role/content (chatml) or from/value (sharegpt speakers, mapped as for sharegpt data;
    `role_mapping` names others)."""
    out: dict[str, Any] = {}
    for column in (*PREFERENCE_COLUMNS, "completion"):
        if column not in row:
            continue
        value = row[column]
        if isinstance(value, list):
            out[column] = [_turn(turn, column, role_mapping or {}) for turn in value]
        else:
            out[column] = [{"role": "user" if column == "prompt" else "assistant", "content": "" if value is None else str(value)}]
    if "label" in row:
        out["label"] = _label(row["label"])
    return out


def _label(value: Any) -> bool:
    """A KTO label: true/false, 1/0 or their words; anything else is refused."""
    from tunelab.worker.formats import DataFormatError

    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    raise DataFormatError("column_mapping", f"a label is {value!r}; unpaired_preference labels are true (a desirable completion) "
                                            "or false (an undesirable one), or 1/0")


def _turn(turn: Any, column: str, roles: dict[str, str]) -> dict[str, str]:
    from tunelab.worker.formats import DataFormatError, _map_role  # formats imports this module

    if isinstance(turn, dict) and turn.get("role") is not None and "content" in turn:
        return {"role": _map_role(str(turn["role"]), "chatml", roles), "content": str(turn["content"] or "")}
    if isinstance(turn, dict) and turn.get("from") is not None and "value" in turn:
        return {"role": _map_role(str(turn["from"]), "sharegpt", roles), "content": str(turn["value"] or "")}
    raise DataFormatError("format", f"a turn in the '{column}' column is {turn!r}; preference messages need role/content "
                                    "(or sharegpt from/value) keys, e.g. [{\"role\": \"assistant\", \"content\": \"Paris.\"}]")
