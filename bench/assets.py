"""Models and datasets the benchmarks train on, built offline and cached in bench/out/cache.

- the demo's tiny Llama and its chat data (`tunelab.demos.text.ensure_demo_assets()`);
- a larger random-init Llama (hidden 256, 4 layers, 4 heads, vocab 8,192) with a BPE
  tokenizer trained here on a synthetic corpus of made-up words;
- text datasets for it: `uniform` (rows of 96-160 tokens) and `skewed` (lognormal
  lengths, median 64 tokens, capped at 1,024 — the shape of real instruction data).

Words are drawn from a Zipf-like distribution over a fixed made-up vocabulary, and the
tokenizer learns a token for nearly every word, so a row of N words is about N tokens.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
CACHE = OUT / "cache"
VERSION = "bench-v1"
VOCAB_SIZE = 8192
SKEWED_MEDIAN, SKEWED_SIGMA, SKEWED_MAX = 64, 1.0, 1024
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]


@dataclass(frozen=True)
class LargerAssets:
    root: Path

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def uniform(self) -> Path:
        return self.root / "uniform.jsonl"

    @property
    def skewed(self) -> Path:
        return self.root / "skewed.jsonl"


def demo_assets():
    from tunelab.demos.text import ensure_demo_assets

    return ensure_demo_assets()


def _words(rng: random.Random, count: int) -> list[str]:
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"] + ["qu", "sh", "th", "ch"]
    words: set[str] = set()
    while len(words) < count:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))))
    return sorted(words)


class _WordSource:
    """Zipf-distributed made-up words, deterministic for a seed."""

    def __init__(self, seed: int, vocabulary: int = 3000):
        self.rng = random.Random(seed)
        self.words = _words(random.Random(0), vocabulary)
        weights = [1.0 / (rank + 10) for rank in range(len(self.words))]
        total = sum(weights)
        self.cumulative = []
        running = 0.0
        for w in weights:
            running += w / total
            self.cumulative.append(running)

    def text(self, n_words: int) -> str:
        return " ".join(self.rng.choices(self.words, cum_weights=self.cumulative, k=n_words))


def _write_rows(path: Path, lengths: list[int], source: _WordSource) -> None:
    with open(path, "w") as f:
        for n in lengths:
            f.write(json.dumps({"text": source.text(n)}) + "\n")


def skewed_lengths(count: int, seed: int = 11) -> list[int]:
    rng = random.Random(seed)
    # One token of every row is the EOS the tokenizer adds, hence the -1.
    return [max(4, min(SKEWED_MAX - 1, round(rng.lognormvariate(0, SKEWED_SIGMA) * SKEWED_MEDIAN))) for _ in range(count)]


def _build_larger(target: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    source = _WordSource(seed=1)
    corpus = [source.text(200) for _ in range(3000)]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")
    fast.model_max_length = 4096
    torch.manual_seed(0)
    # The tokenizer learns fewer tokens than the model has rows: the spare rows, as in many
    # real models, are never used but cost their share of the output layer.
    config = LlamaConfig(vocab_size=VOCAB_SIZE, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=4096,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                         pad_token_id=fast.pad_token_id, tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(target / "model")
    fast.save_pretrained(target / "model")
    rows = _WordSource(seed=2)
    _write_rows(target / "uniform.jsonl", [random.Random(3).randint(96, 160) for _ in range(600)], rows)
    _write_rows(target / "skewed.jsonl", skewed_lengths(2400), rows)


def larger_assets() -> LargerAssets:
    """The larger model and its datasets, built on first use (about 20 s)."""
    target = CACHE / VERSION
    if (target / "READY").exists():
        return LargerAssets(target)
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=CACHE))
    try:
        _build_larger(tmp)
        (tmp / "READY").write_text(VERSION)
        shutil.rmtree(target, ignore_errors=True)
        os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return LargerAssets(target)
