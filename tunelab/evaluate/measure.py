"""The eval child's measurements: loss/perplexity on the run's eval split, and answers to a
prompt set from the base and the fine-tune.

The eval rows are the ones training evaluated on: `sources.load_raw` chooses them from the
run's stored config exactly as the worker did (eval_split, local_eval_datasets, a
conventionally named split, or the seeded held-out share), and `tokenize_example` turns
them into the same tokens and labels. The loss follows the Trainer's eval convention:
batches of `batch_size` rows in order, each batch's mean loss over its labelled tokens,
averaged over batches weighted by their row count; perplexity is exp(loss). So the
fine-tune's number equals the run's last logged eval_loss when that was at the end.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tunelab.worker.data.formats import DataFormatError

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

# Rows of the eval split that become the default prompt set.
DEFAULT_PROMPTS = 5


class NoEvalSplit(DataFormatError):
    """The run's config builds no eval split."""


def eval_data(config: WorkerConfig, cache_dir: Path) -> Any:
    """The run's raw eval rows and format (`sources.RawData`), as training chose them."""
    from tunelab.worker.data.sources import load_raw

    raw = load_raw(config, cache_dir)
    if raw.eval is None:
        raise NoEvalSplit("eval_steps", "the run's config builds no eval split (eval_steps is 0)")
    return raw


def token_rows(raw: Any, config: WorkerConfig, tokenizer: Any) -> list[dict[str, list[int]]]:
    """The eval rows as training tokenized them; rows with no labelled token are dropped, as there."""
    from tunelab.worker.data.tokenization import ensure_chat_template, tokenize_example, uses_raw_text

    if not uses_raw_text(raw.format, config):
        ensure_chat_template(tokenizer)
    rows = [tokenize_example(row, raw.format, tokenizer, config) for row in raw.eval]
    rows = [row for row in rows if any(row["completion_mask"])]
    if not rows:
        raise DataFormatError("eval_split", "the eval split has no rows with tokens to measure")
    return rows


def mean_loss(model: Any, rows: list[dict[str, list[int]]], batch_size: int, device: str, pad_id: int) -> dict[str, Any]:
    """The Trainer-convention eval loss of `model` on `rows` (see the module docstring)."""
    import torch

    from tunelab.worker.data.tokenization import IGNORE_INDEX

    weighted, counted, tokens = 0.0, 0, 0
    for start in range(0, len(rows), batch_size):
        batch = rows[start:start + batch_size]
        width = max(len(row["input_ids"]) for row in batch)
        ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        labels = torch.full((len(batch), width), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, row in enumerate(batch):
            n = len(row["input_ids"])
            ids[i, :n] = torch.tensor(row["input_ids"])
            labels[i, :n] = torch.tensor(row["labels"])
            mask[i, :n] = 1
        with torch.inference_mode():
            out = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device))
        weighted += float(out.loss) * len(batch)
        counted += len(batch)
        tokens += int((labels[:, 1:] != IGNORE_INDEX).sum())  # the model predicts each label from the tokens before it
    loss = weighted / counted
    if not math.isfinite(loss):  # a diverged model; JSON has no NaN, and null says "not measurable"
        return {"loss": None, "perplexity": None, "rows": counted, "tokens": tokens}
    return {"loss": loss, "perplexity": math.exp(loss) if loss < 700 else None, "rows": counted, "tokens": tokens}


def perplexity(loaded: Any, config: WorkerConfig, raw: Any) -> dict[str, Any]:
    """Loss and perplexity of the fine-tune and of its base on the eval rows."""
    rows = token_rows(raw, config, loaded.tokenizer)
    batch_size = config.batch_size
    tokenizer = loaded.tokenizer
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    result: dict[str, Any] = {}
    for side, adapter in (("fine_tune", True), ("base", False)):
        model, context = loaded.model_for(adapter)
        with context:
            measured = mean_loss(model, rows, batch_size, loaded.device, pad_id)
        result[side] = {"loss": measured["loss"], "perplexity": measured["perplexity"]}
        result.update(rows=measured["rows"], tokens=measured["tokens"])
    result["batch_size"] = batch_size
    return result


def default_prompts(raw: Any, config: WorkerConfig, count: int = DEFAULT_PROMPTS) -> list[dict[str, Any]]:
    """Prompts from the first eval rows: a conversation up to its last assistant turn (that
    turn is the reference answer), or the first half of a raw text (the rest is the reference)."""
    from tunelab.worker.data.formats import to_messages, to_plain_text
    from tunelab.worker.data.tokenization import uses_raw_text

    prompts: list[dict[str, Any]] = []
    for row in raw.eval:
        if len(prompts) >= count:
            break
        if uses_raw_text(raw.format, config):
            words = to_plain_text(row, raw.format, config).split(" ")
            half = max(1, len(words) // 2)
            if len(words) > 1:
                prompts.append({"prompt": " ".join(words[:half]), "reference": " ".join(words[half:])})
            continue
        messages = to_messages(row, raw.format, config)
        last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
        if last:  # an assistant turn with something before it
            prompts.append({"messages": messages[:last], "reference": messages[last]["content"]})
    return prompts


def answer(loaded: Any, prompt: dict[str, Any], adapter: bool, sampling: dict[str, Any], max_time_s: float) -> dict[str, Any]:
    """One bounded answer through the inference child's own generation code."""
    from tunelab.inference.generate import generate

    pieces: list[str] = []
    done: dict[str, Any] = {}

    def send(message: dict[str, Any]) -> None:
        if message["type"] == "token":
            pieces.append(message["text"])
        elif message["type"] == "done":
            done.update(message)

    request = {"id": "eval", "adapter": adapter, "sampling": sampling, "max_time_s": max_time_s}
    request.update({"messages": prompt["messages"]} if "messages" in prompt else {"prompt": prompt["prompt"]})
    generate(loaded, request, threading.Event(), send)
    return {"text": "".join(pieces), "finish_reason": done.get("finish_reason"), "tokens": done.get("completion_tokens", 0)}


def generations(loaded: Any, prompts: list[dict[str, Any]], sampling: dict[str, Any], max_time_s: float,
                progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """Each prompt answered by the base, then by the fine-tune."""
    items = []
    for i, prompt in enumerate(prompts, 1):
        progress(f"generating {i}/{len(prompts)}")
        item = {key: prompt[key] for key in ("messages", "prompt", "reference") if key in prompt}
        item["base"] = answer(loaded, prompt, False, sampling, max_time_s)
        item["fine_tune"] = answer(loaded, prompt, True, sampling, max_time_s)
        items.append(item)
    return items
