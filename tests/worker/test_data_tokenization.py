"""Tokenization and completion masking, checked token by token against an independent walk."""

from __future__ import annotations

import copy
import json

import pytest
from transformers import AutoTokenizer

from typed_config import typed
from tunelab.worker.data.prepare import (FALLBACK_CHAT_TEMPLATE, IGNORE_INDEX, DataFormatError, load_raw, prepare, to_messages,
                                 tokenize_example)


@pytest.fixture(scope="module")
def tokenizer(demo_assets):
    return AutoTokenizer.from_pretrained(demo_assets.model_dir)


def _prepare(config, tokenizer, cache_dir):
    return prepare(typed(config), tokenizer, load_raw(config, cache_dir))


def _config(path, **extra):
    return typed({"local_datasets": [str(path)], "eval_steps": 0, "format": "auto", "max_seq_length": 256,
                  "training_type": "lora", **extra})


def expected_labels(ids: list[int], tokenizer) -> list[int]:
    """Walk the tokens the way a reader of the demo template would: a reply starts after
    the `<|assistant|>` marker and its newline, and ends with the `<|end|>` marker."""
    start_marker = tokenizer.convert_tokens_to_ids("<|assistant|>")
    end_marker = tokenizer.convert_tokens_to_ids("<|end|>")
    newline = tokenizer("\n", add_special_tokens=False)["input_ids"]
    labels, inside, i = [], False, 0
    while i < len(ids):
        if not inside and ids[i] == start_marker:
            header = 1 + len(newline)
            assert ids[i + 1 : i + header] == newline
            labels += [IGNORE_INDEX] * header
            inside, i = True, i + header
            continue
        labels.append(ids[i] if inside else IGNORE_INDEX)
        if ids[i] == end_marker:
            inside = False
        i += 1
    return labels


@pytest.mark.parametrize("attr", ["alpaca", "sharegpt", "chatml"])
def test_completion_mask_matches_an_independent_walk(demo_assets, tokenizer, attr, data_cache):
    config = _config(getattr(demo_assets, attr), train_on_completions=True)
    prepared = _prepare(config, tokenizer, data_cache)
    unmasked = _prepare(config.model_copy(update={"train_on_completions": False}), tokenizer, data_cache)
    assert len(prepared.train) == len(unmasked.train)
    for row, plain in zip(prepared.train, unmasked.train):
        # Masking changes only the labels, never the tokens the model reads.
        assert row["input_ids"] == plain["input_ids"] == plain["labels"]
        assert row["labels"] == expected_labels(row["input_ids"], tokenizer)
        assert row["completion_mask"] == [int(label != IGNORE_INDEX) for label in row["labels"]]


def test_function_call_turns_are_trained_and_tool_answers_are_not(demo_assets, tokenizer, data_cache):
    prepared = _prepare(_config(demo_assets.sharegpt, train_on_completions=True), tokenizer, data_cache)
    turns = json.loads(demo_assets.sharegpt.read_text())[0]["conversations"]  # has a function call
    assert [t["from"] for t in turns] == ["system", "human", "function_call", "observation", "gpt"]
    trained = tokenizer.decode([t for t in prepared.train[0]["labels"] if t != IGNORE_INDEX])
    # The call and the final reply, each with its end marker; not the system, user or tool turns.
    assert trained == f"{turns[2]['value']}<|end|>{turns[4]['value']}<|end|>"


def test_model_without_chat_template_gets_the_fallback(demo_assets, tokenizer, data_cache):
    bare = copy.deepcopy(tokenizer)
    bare.chat_template = None
    prepared = _prepare(_config(demo_assets.chatml, train_on_completions=True), bare, data_cache)
    assert bare.chat_template == FALLBACK_CHAT_TEMPLATE
    row = prepared.train[0]
    assert row["input_ids"][0] == bare.bos_token_id
    # The fallback ends each turn with the EOS token (<|end|> here), so the same walk applies.
    assert row["labels"] == expected_labels(row["input_ids"], bare)


def test_masking_that_leaves_most_rows_empty_fails_with_a_reason(demo_assets, tokenizer, data_cache):
    with pytest.raises(DataFormatError) as err:
        _prepare(_config(demo_assets.chatml, train_on_completions=True, max_seq_length=16), tokenizer, data_cache)
    assert err.value.field == "train_on_completions"
    assert "max_seq_length" in str(err.value) and "rows have no tokens" in str(err.value)


def test_role_mapping_that_removes_every_reply_is_caught(demo_assets, tokenizer, data_cache):
    config = _config(demo_assets.sharegpt, train_on_completions=True,
                     role_mapping={"gpt": "user", "function_call": "user"})
    with pytest.raises(DataFormatError) as err:
        _prepare(config, tokenizer, data_cache)
    assert "assistant" in str(err.value)


def test_continued_pretraining_trains_plain_text_on_every_token(demo_assets, tokenizer, data_cache):
    prepared = _prepare(_config(demo_assets.alpaca, training_type="continued_pretraining"), tokenizer, data_cache)
    row = prepared.train[0]
    assert row["labels"] == row["input_ids"]
    assert row["input_ids"][-1] == tokenizer.eos_token_id
    text = tokenizer.decode(row["input_ids"])
    assert "<|user|>" not in text and "<|assistant|>" not in text
    assert text.startswith("Add the two numbers.")


def test_raw_text_cannot_train_on_completions(demo_assets, tokenizer, data_cache):
    with pytest.raises(DataFormatError) as err:
        _prepare(_config(demo_assets.text, train_on_completions=True), tokenizer, data_cache)
    assert err.value.field == "train_on_completions"


def test_rows_are_truncated_to_max_seq_length(demo_assets, tokenizer, data_cache):
    prepared = _prepare(_config(demo_assets.sharegpt, max_seq_length=24), tokenizer, data_cache)
    lengths = [len(ids) for ids in prepared.train["input_ids"]]
    assert max(lengths) == 24


@pytest.mark.parametrize("attr, extra", [("alpaca", {}), ("sharegpt", {"train_on_completions": True}),
                                         ("chatml", {"max_seq_length": 24}), ("text", {})])
def test_a_batch_of_rows_tokenizes_as_each_row_alone(demo_assets, tokenizer, attr, extra, data_cache):
    """prepare() hands the tokenizer a batch of rows at once; every row's tokens, labels
    and mask are those it gets alone, in the same order."""
    config = _config(getattr(demo_assets, attr), **extra)
    raw = load_raw(config, data_cache)
    prepared = prepare(typed(config), tokenizer, raw)
    alone = [tokenize_example(row, raw.format, tokenizer, typed(config)) for row in raw.train]
    alone = [row for row in alone if any(row["completion_mask"])]  # prepare() drops rows with nothing to learn
    assert len(alone) > 1
    assert [row["input_ids"] for row in alone] == prepared.train["input_ids"]
    assert [row["labels"] for row in alone] == prepared.train["labels"]
    assert [row["completion_mask"] for row in alone] == prepared.train["completion_mask"]


def test_to_messages_keeps_a_system_column(tmp_path):
    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "system": "Be kind."}
    assert to_messages(row, "chatml", typed())[0] == {"role": "system", "content": "Be kind."}
