"""How much one dataset preview carries back, and how text is cut to fit: shared by the
preview child (`child`) and its image and audio parts (`images`, `audio`)."""

from __future__ import annotations

# What one preview may carry back: a row's text (and each chat turn), all rows together,
# the column list. A preview is for reading, not for copying a dataset through the server.
ROW_CHARS = 4_000
TOTAL_CHARS = 40_000
MAX_COLUMNS = 200
MAX_TURNS = 64
COLUMN_CHARS = 200


def truncate(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [truncated: {len(text) - limit:,} more characters]"


def short_messages(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """A row's chat turns within ROW_CHARS of content and MAX_TURNS turns, all marked."""
    out, left = [], ROW_CHARS
    for message in messages[:MAX_TURNS]:
        content = str(message.get("content", ""))
        out.append({"role": truncate(str(message.get("role", "")), COLUMN_CHARS), "content": truncate(content, max(left, 0))})
        left -= len(content)
    if len(messages) > MAX_TURNS:
        out[-1]["content"] += f" … [truncated: {len(messages) - MAX_TURNS:,} more turns]"
    return out
