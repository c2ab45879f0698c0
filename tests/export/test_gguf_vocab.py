"""The GGUF tokenizer section built from tokenizer.json (no model, no training): which
tokenizers are accepted, how llama.cpp is told to split text, ids past the vocab, and the
merges and special tokens that `gguf.SpecialVocab` reads from the saved folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf import SpecialVocab, TokenType
from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers, processors

from tunelab.export.gguf_vocab import LLAMA3_SPLIT_REGEX, byte_level_bpe_vocab, special_vocab
from tunelab.export.plan import ExportInputError


def tokenizer_json(pre_tokenizer, model=None) -> dict:
    tokenizer = Tokenizer(model or models.BPE(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")]))
    tokenizer.pre_tokenizer = pre_tokenizer
    return json.loads(tokenizer.to_str())


def saved(folder: Path, data: dict, config: dict | None = None) -> SpecialVocab:
    """`data` saved as a tokenizer folder (with `config` as tokenizer_config.json), read back."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(data))
    if config is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return special_vocab(folder)


def test_the_demo_tokenizer_becomes_a_gpt2_vocab_padded_to_the_embedding(demo_assets):
    data = json.loads((demo_assets.model_dir / "tokenizer.json").read_text())
    size = len(data["model"]["vocab"]) + len({t["id"] for t in data["added_tokens"]} - set(data["model"]["vocab"].values()))
    vocab = byte_level_bpe_vocab(data, size + 3, special_vocab(demo_assets.model_dir))
    assert vocab.pre_tokenizer == "gpt-2"
    assert vocab.tokens[1] == "<s>" and vocab.types[1] == TokenType.CONTROL
    assert vocab.tokens[-3:] == [f"[PAD{i}]" for i in range(size, size + 3)]
    assert vocab.types[-3:] == [TokenType.UNUSED] * 3
    assert len(vocab.merges) == len(data["model"]["merges"]) and all(m.count(" ") == 1 for m in vocab.merges)
    assert vocab.special.special_token_ids == {"bos": 1, "eos": 8, "unk": 3, "pad": 0}
    assert vocab.special.add_special_token == {"bos": False}  # the demo tokenizer adds no BOS
    assert vocab.special.chat_template == (demo_assets.model_dir / "chat_template.jinja").read_text()


def test_llama3_style_split_is_named_for_llama_cpp(tmp_path):
    split = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_SPLIT_REGEX), behavior="isolated"),
                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    data = tokenizer_json(split)
    vocab = byte_level_bpe_vocab(data, 3, saved(tmp_path, data))
    assert vocab.pre_tokenizer == "llama-bpe"
    assert vocab.tokens == ["a", "b", "ab"] and vocab.merges == ["a b"]


def test_merges_with_spaces_and_an_added_bos_are_written_as_llama_cpp_reads_them(tmp_path):
    """Merges stored as pairs whose pieces hold a space (transformers >= 4.45) keep one
    separator per rule; a post-processor that puts BOS first means add-BOS."""
    tokenizer = Tokenizer(models.BPE(vocab={"a": 0, " ": 1, "a ": 2, "b": 3, "a b": 4},
                                     merges=[("a", " "), ("a ", "b")]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel()
    tokenizer.add_special_tokens([AddedToken("<|begin|>", special=True)])
    tokenizer.post_processor = processors.TemplateProcessing(single="<|begin|> $A", special_tokens=[("<|begin|>", 5)])
    data = json.loads(tokenizer.to_str())
    assert data["model"]["merges"][1] == ["a ", "b"]
    vocab = byte_level_bpe_vocab(data, 6, saved(tmp_path, data, {"bos_token": "<|begin|>"}))
    assert vocab.merges == ["a \u0120", "a\u0120 b"]  # a space inside a piece is written as U+0120
    assert all(m.count(" ") == 1 for m in vocab.merges)
    assert vocab.special.special_token_ids == {"bos": 5}
    assert vocab.special.add_special_token["bos"] is True


@pytest.mark.parametrize("data", [
    pytest.param(lambda: tokenizer_json(pre_tokenizers.Metaspace()), id="sentencepiece-style"),
    pytest.param(lambda: tokenizer_json(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"\d+|\D+"), behavior="isolated"),
                                                                 pre_tokenizers.ByteLevel(use_regex=False)])), id="unknown-split"),
    pytest.param(lambda: tokenizer_json(pre_tokenizers.ByteLevel(), models.WordPiece(vocab={"a": 0, "[UNK]": 1})), id="wordpiece"),
    pytest.param(lambda: {}, id="no-tokenizer-json"),
])
def test_other_tokenizers_are_refused_naming_the_format(data, tmp_path):
    with pytest.raises(ExportInputError) as refused:
        byte_level_bpe_vocab(data(), 3, special_vocab(tmp_path))
    assert refused.value.field == "format" and "convert_hf_to_gguf.py" in str(refused.value)


def test_a_token_id_past_the_embedding_is_refused(tmp_path):
    with pytest.raises(ExportInputError, match="embedding has only 2 rows"):
        byte_level_bpe_vocab(tokenizer_json(pre_tokenizers.ByteLevel()), 2, special_vocab(tmp_path))


def test_an_unreadable_merges_format_is_refused_naming_the_format(tmp_path):
    data = tokenizer_json(pre_tokenizers.ByteLevel())
    data["model"]["merges"] = [{"left": "a", "right": "b"}]
    with pytest.raises(ExportInputError) as refused:
        saved(tmp_path, data)
    assert refused.value.field == "format" and "convert_hf_to_gguf.py" in str(refused.value)
