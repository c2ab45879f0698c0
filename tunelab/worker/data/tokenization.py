"""Turning one row into training tokens: chat-template rendering and completion masking.

Chat data is rendered with the tokenizer's own chat template. A model without one gets
`FALLBACK_CHAT_TEMPLATE`, stored on the tokenizer so the saved run renders the same way:

    <s><|user|>
    What is 2+2?</s>
    <|assistant|>
    4</s>

(each turn is `<|role|>`, a newline, the content, the EOS token and a newline; `<s>` is
the BOS token when the tokenizer has one).

With `train_on_completions`, labels are -100 everywhere except on assistant turns. The
assistant turns are located exactly by rendering the conversation prefix by prefix: turn i
covers the characters from the end of `render(messages[:i], add_generation_prompt=True)`
to the end of `render(messages[:i+1])` less trailing whitespace (so the reply and its
end-of-turn marker are trained, the separator before the next turn is not). A token is trained when its first character lies in
such a span (offsets come from the fast tokenizer on the full rendered text, so the token
ids are the same as without masking). Torch-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunelab.config.chat_template import FALLBACK_CHAT_TEMPLATE
from tunelab.worker.families.embedding.formats import EMBEDDING_FORMATS
from tunelab.worker.data.formats import DataFormatError, to_messages, to_plain_text

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

IGNORE_INDEX = -100


def ensure_chat_template(tokenizer: Any) -> bool:
    """Give a tokenizer without a chat template the fallback one; True when it was needed."""
    if getattr(tokenizer, "chat_template", None):
        return False
    tokenizer.chat_template = FALLBACK_CHAT_TEMPLATE
    return True


def uses_raw_text(fmt: str, config: WorkerConfig) -> bool:
    """Raw text is trained as is, without a chat template, on every token; an embedding
    model's texts (pairs, triplets, ...) are embedded as they are too."""
    return fmt == "text" or fmt in EMBEDDING_FORMATS or config.training_type == "continued_pretraining"


def render(tokenizer: Any, messages: list[dict[str, str]], add_generation_prompt: bool = False) -> str:
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    except Exception as exc:  # jinja TemplateError, or a template's own raise_exception()
        roles = sorted({m["role"] for m in messages})
        raise DataFormatError(
            "role_mapping",
            f"the model's chat template refused a conversation with roles {roles}: {exc}. "
            "Map unsupported roles onto ones it accepts with role_mapping, e.g. {observation: user}",
        ) from exc


def assistant_spans(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character spans of its assistant turns."""
    full = render(tokenizer, messages)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = render(tokenizer, messages[:i], add_generation_prompt=True)
        through = render(tokenizer, messages[: i + 1])
        if not (through.startswith(before) and full.startswith(through)):
            raise DataFormatError(
                "train_on_completions",
                "the model's chat template renders earlier turns differently once later turns follow "
                "(for example it drops reasoning from past replies), so the assistant tokens cannot be "
                "located exactly; set train_on_completions=false or use a model with a prefix-stable template",
            )
        # Whitespace separating this turn from the next belongs to the template, not the reply.
        spans.append((len(before), max(len(before), len(through.rstrip()))))
    return full, spans


def _with_eos(ids: list[int], tokenizer: Any) -> list[int]:
    eos = tokenizer.eos_token_id
    if eos is not None and (not ids or ids[-1] != eos):
        ids = ids + [eos]
    return ids


def tokenize_example(row: dict[str, Any], fmt: str, tokenizer: Any, config: WorkerConfig) -> dict[str, list[int]]:
    """`input_ids`, `labels` (-100 where no loss is taken) and `completion_mask` for one row."""
    return tokenize_rows([row], fmt, tokenizer, config)[0]


# Only the ids (and offsets, where asked) are used: the attention mask and token type ids a
# tokenizer call builds by default are a Python list per row that is thrown away: interpreter
# time on the thread that shares the lock with the model's imports (10,000 chat rows prepared
# alone: ~2.5 s instead of ~2.6 s).
IDS_ONLY = {"return_attention_mask": False, "return_token_type_ids": False}


def tokenize_rows(rows: list[dict[str, Any]], fmt: str, tokenizer: Any, config: WorkerConfig) -> list[dict[str, list[int]]]:
    """`tokenize_example` for many rows: each row is rendered on its own, then all texts go
    to the tokenizer in one call, which a fast tokenizer spreads over the CPU cores (a
    fast tokenizer gives the same ids for a text alone or in a batch)."""
    max_len = config.max_seq_length
    if uses_raw_text(fmt, config):
        texts = [to_plain_text(row, fmt, config) for row in rows]
        encoded = tokenizer(texts, add_special_tokens=True, **IDS_ONLY)["input_ids"]
        return [_all_trained(_with_eos(list(ids), tokenizer)[:max_len]) for ids in encoded]

    conversations = [to_messages(row, fmt, config) for row in rows]
    if not config.train_on_completions:
        # The chat template already holds any BOS/EOS markers, so none are added here.
        encoded = tokenizer([render(tokenizer, messages) for messages in conversations], add_special_tokens=False,
                            **IDS_ONLY)["input_ids"]
        return [_all_trained(list(ids)[:max_len]) for ids in encoded]

    rendered = [assistant_spans(tokenizer, messages) for messages in conversations]
    try:
        encoded = tokenizer([text for text, _ in rendered], add_special_tokens=False, return_offsets_mapping=True,
                            **IDS_ONLY)
    except NotImplementedError as exc:  # only tokenizers backed by `tokenizers` report offsets
        raise DataFormatError("train_on_completions", f"this model's tokenizer cannot report token offsets ({exc}), which completion masking needs; set train_on_completions=false") from exc
    out = []
    for (_, spans), row_ids, row_offsets in zip(rendered, encoded["input_ids"], encoded["offset_mapping"]):
        ids = list(row_ids)[:max_len]
        mask = [1 if any(start <= first < end for start, end in spans) else 0 for first, _ in row_offsets[: len(ids)]]
        labels = [tok if keep else IGNORE_INDEX for tok, keep in zip(ids, mask)]
        out.append({"input_ids": ids, "labels": labels, "completion_mask": mask})
    return out


def _all_trained(ids: list[int]) -> dict[str, list[int]]:
    return {"input_ids": ids, "labels": list(ids), "completion_mask": [1] * len(ids)}
