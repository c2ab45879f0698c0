"""The GGUF tokenizer section built from tokenizer.json (no model, no training): which
tokenizers are accepted, how llama.cpp is told to split text, and ids past the vocab."""

from __future__ import annotations

import json

import pytest
from gguf import TokenType
from tokenizers import Regex, Tokenizer, models, pre_tokenizers

from tunelab.export.gguf_vocab import LLAMA3_SPLIT_REGEX, SpecialTokens, byte_level_bpe_vocab
from tunelab.export.plan import ExportInputError

SPECIAL = SpecialTokens(bos_id=1, eos_id=8, pad_id=0, unk_id=3, add_bos=False, chat_template=None)


def tokenizer_json(pre_tokenizer, model=None) -> dict:
    tokenizer = Tokenizer(model or models.BPE(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")]))
    tokenizer.pre_tokenizer = pre_tokenizer
    return json.loads(tokenizer.to_str())


def test_the_demo_tokenizer_becomes_a_gpt2_vocab_padded_to_the_embedding(demo_assets):
    data = json.loads((demo_assets.model_dir / "tokenizer.json").read_text())
    size = len(data["model"]["vocab"]) + len({t["id"] for t in data["added_tokens"]} - set(data["model"]["vocab"].values()))
    vocab = byte_level_bpe_vocab(data, size + 3, SPECIAL)
    assert vocab.pre_tokenizer == "gpt-2"
    assert vocab.tokens[1] == "<s>" and vocab.types[1] == TokenType.CONTROL
    assert vocab.tokens[-3:] == [f"[PAD{i}]" for i in range(size, size + 3)]
    assert vocab.types[-3:] == [TokenType.UNUSED] * 3
    assert len(vocab.merges) == len(data["model"]["merges"]) and all(m.count(" ") == 1 for m in vocab.merges)


def test_llama3_style_split_is_named_for_llama_cpp():
    split = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_SPLIT_REGEX), behavior="isolated"),
                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    vocab = byte_level_bpe_vocab(tokenizer_json(split), 3, SPECIAL)
    assert vocab.pre_tokenizer == "llama-bpe"
    assert vocab.tokens == ["a", "b", "ab"] and vocab.merges == ["a b"]


@pytest.mark.parametrize("data", [
    pytest.param(lambda: tokenizer_json(pre_tokenizers.Metaspace()), id="sentencepiece-style"),
    pytest.param(lambda: tokenizer_json(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"\d+|\D+"), behavior="isolated"),
                                                                 pre_tokenizers.ByteLevel(use_regex=False)])), id="unknown-split"),
    pytest.param(lambda: tokenizer_json(pre_tokenizers.ByteLevel(), models.WordPiece(vocab={"a": 0, "[UNK]": 1})), id="wordpiece"),
    pytest.param(lambda: {}, id="no-tokenizer-json"),
])
def test_other_tokenizers_are_refused_naming_the_format(data):
    with pytest.raises(ExportInputError) as refused:
        byte_level_bpe_vocab(data(), 3, SPECIAL)
    assert refused.value.field == "format" and "convert_hf_to_gguf.py" in str(refused.value)


def test_a_token_id_past_the_embedding_is_refused():
    with pytest.raises(ExportInputError, match="embedding has only 2 rows"):
        byte_level_bpe_vocab(tokenizer_json(pre_tokenizers.ByteLevel()), 2, SPECIAL)
