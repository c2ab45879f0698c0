"""Stored evaluations as plain text for `tunelab eval`: one block per result, newest last.

Every value that came from data or a model goes through `printable`, so an answer full of
control characters cannot drive the terminal.
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from tunelab.text import printable

SHOWN_CHARS = 300


def _number(value: Any, digits: int = 4) -> str:
    return "?" if value is None else f"{value:.{digits}f}"


def _one_line(text: Any) -> str:
    return printable(str(text or "").replace("\n", "⏎"), SHOWN_CHARS)


def _what(payload: dict[str, Any]) -> str:
    return f"checkpoint {payload['step']}" if payload.get("step") is not None else "final weights"


def _perplexity(payload: dict[str, Any]) -> list[str]:
    lines = [f"loss and perplexity on the eval split ({payload.get('rows')} rows, {payload.get('tokens')} tokens, "
             f"{_what(payload)}, {payload.get('device')}):"]
    for label, side in (("base", "base"), ("fine-tune", "fine_tune")):
        numbers = payload.get(side) or {}
        lines.append(f"  {label:<10} loss {_number(numbers.get('loss'))}  perplexity {_number(numbers.get('perplexity'), 2)}")
    return lines


def _content(content: Any) -> str:
    """A message's text, with [image] / [audio] where a media part was."""
    if isinstance(content, list):
        return "".join(f"[{p.get('type')}]" if p.get("type") in ("image", "audio") else str(p.get("text") or "") for p in content)
    return str(content)


def _prompt_text(item: dict[str, Any]) -> str:
    if "messages" in item:
        return " | ".join(f"{m.get('role')}: {_content(m.get('content'))}" for m in item["messages"])
    return str(item.get("prompt") or "")


def _generations(payload: dict[str, Any]) -> list[str]:
    sampling = payload.get("sampling") or {}
    items = payload.get("items") or []
    lines = [f"answers to {len(items)} prompt(s) from {printable(payload.get('source'))} ({_what(payload)}, greedy, "
             f"at most {sampling.get('max_new_tokens')} tokens):"]
    wer = payload.get("wer")
    if wer is not None:  # a speech-to-text run: its transcripts of every eval clip, scored
        lines[0] = (f"transcripts of {payload.get('rows')} eval clip(s), {len(items)} shown ({_what(payload)}, greedy):")
        lines.append(f"  word error rate  base {_number(wer.get('base'))}  fine-tune {_number(wer.get('fine_tune'))}")
    for i, item in enumerate(items, 1):
        lines.append(f"  [{i}] prompt:    {_one_line(_prompt_text(item))}")
        if item.get("reference") is not None:
            lines.append(f"      reference: {_one_line(item['reference'])}")
        lines.append(f"      base:      {_one_line((item.get('base') or {}).get('text'))}")
        lines.append(f"      fine-tune: {_one_line((item.get('fine_tune') or {}).get('text'))}")
    return lines


def _lm_eval(payload: dict[str, Any]) -> list[str]:
    limit = payload.get("limit")
    lines = [f"lm-eval ({_what(payload)}" + (f", at most {limit} examples per task" if limit else "") + "):"]
    for task, scores in (payload.get("scores") or {}).items():
        shown = "  ".join(f"{printable(name)} {_number(value)}" for name, value in scores.items())
        count = (payload.get("samples") or {}).get(task)
        lines.append(f"  {printable(task)}: {shown}" + (f"  ({count} examples)" if count is not None else ""))
    return lines


RENDERERS = {"perplexity": _perplexity, "generations": _generations, "lm_eval": _lm_eval}


def render(records: Iterable[dict[str, Any]]) -> str:
    blocks = []
    for record in records:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(record["created_at"]))
        body = RENDERERS[record["kind"]](record["payload"])
        blocks.append("\n".join([f"#{record['id']} {when} " + body[0], *body[1:]]))
    return "\n\n".join(blocks)
