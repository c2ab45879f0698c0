"""OpenAI-format image rows for the vision tests: chat messages whose user turn holds a
text part and an `image_url` part (a `data:` URI by default), with no images column."""

from __future__ import annotations

import base64
import json
from pathlib import Path


def data_uri(image: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(image.read_bytes()).decode()


def openai_row(url: str, question: str = "What is shown?", answer: str = "A red circle.", answer_as_text: bool = False) -> dict:
    """One row; `answer_as_text`: the reply's content a plain string, as OpenAI's files often
    have it (a table then holds text in one turn and parts in another)."""
    return {"messages": [
        {"role": "user", "content": [{"type": "text", "text": question}, {"type": "image_url", "image_url": {"url": url}}]},
        {"role": "assistant", "content": answer if answer_as_text else [{"type": "text", "text": answer}]},
    ]}


def openai_rows(assets, count: int, answer_as_text: bool = False) -> list[dict]:
    """`count` rows, each with one of the demo images as a data: URI."""
    images = sorted((assets.data_dir / "images").glob("*.png"))
    return [openai_row(data_uri(images[i % len(images)]), answer_as_text=answer_as_text) for i in range(count)]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
