"""What every dataset format module reads rows with: `DataFormatError`, the columns a
conversation or images are found under, a cell as text, an alpaca row as chat turns and a
ShareGPT speaker as a chat role. Below `formats` (which recognises the formats and turns
rows into messages) and the family and objective format modules it asks, so that none of
them imports another in a circle. Torch-free.
"""

from __future__ import annotations

from typing import Any

from tunelab.worker.context import RunSettingError

# Column names under which datasets commonly keep a conversation.
CONVERSATION_COLUMNS = ("conversations", "messages", "conversation", "chat", "dialogue", "dialog")
# Column names under which image-text datasets keep their images (paths or image features).
IMAGE_COLUMNS = ("images", "image")
# ShareGPT speakers -> chat-template roles. Function-calling datasets add their own speakers:
# the model's tool call is an assistant turn (it is what we want the model to learn to
# write), while the tool's answer is input to the model, like a user turn.
SHAREGPT_ROLES = {
    "human": "user", "user": "user",
    "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "bing": "assistant",
    "bard": "assistant", "model": "assistant", "bot": "assistant",
    "system": "system",
    "function_call": "assistant", "tool_call": "assistant", "tool_calls": "assistant",
    "observation": "tool", "function_response": "tool", "function": "tool", "tool": "tool",
}


class DataFormatError(RunSettingError):
    """Data that cannot be read as configured; `field` is the config setting to change."""


def conversation_column(columns: list[str]) -> str | None:
    return next((c for c in CONVERSATION_COLUMNS if c in columns), None)


def image_column(columns: list[str]) -> str | None:
    return next((c for c in IMAGE_COLUMNS if c in columns), None)


def _text(value: Any, column: str = "") -> str:
    """A cell as text. Numbers and booleans read as written; a dict or a list is never
    stringified (the model would learn to answer in Python's dict syntax): an error
    naming the column."""
    if isinstance(value, (dict, list, tuple)):
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise DataFormatError("dataset", f"column '{column or '?'}' holds a {type(value).__name__} ({shown}) where text "
                                         "belongs; give it a string, or map the column that holds the text with column_mapping")
    return "" if value is None else str(value)


def _alpaca_messages(row: dict[str, Any]) -> list[dict[str, str]]:
    messages = []
    if _text(row.get("system"), "system").strip():
        messages.append({"role": "system", "content": _text(row["system"], "system")})
    prompt = _text(row.get("instruction"), "instruction")
    if _text(row.get("input"), "input").strip():
        prompt = f"{prompt}\n\n{_text(row['input'], 'input')}"
    messages.append({"role": "user", "content": prompt})
    messages.append({"role": "assistant", "content": _text(row.get("output"), "output")})
    return messages


def _map_role(raw: str, fmt: str, role_mapping: dict[str, str]) -> str:
    if raw in role_mapping:
        return role_mapping[raw]
    if fmt == "chatml":
        return raw
    role = SHAREGPT_ROLES.get(raw.lower())
    if role is None:
        raise DataFormatError(
            "role_mapping",
            f"unknown speaker '{raw}' in sharegpt data (known: {sorted(SHAREGPT_ROLES)}); "
            f"map it with role_mapping, e.g. {{{raw}: assistant}}",
        )
    return role
