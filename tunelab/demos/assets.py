"""The built-in demo: a tiny random-init Llama, a locally trained BPE tokenizer with a
chat template, and sample datasets in every supported format — all generated offline.

Built once and cached under `<home>/cache/demo-v1` (or any folder given). The sample
data is synthetic but learnable (templated arithmetic, colours, capitals, reversals),
so the demo's loss visibly falls within a minute on two CPU cores.
Heavy imports (torch, transformers, tokenizers) happen only inside `build_demo_assets`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tunelab import paths

DEMO_VERSION = "demo-v1"
# A Llama-style template: system/user/assistant turns, generation prompt for inference.
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{{ '<|' + m['role'] + '|>\n' + m['content'] + '<|end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|end|>"]


# The recipe both demos train with (text and vision): LoRA settings that make the tiny
# random-init models visibly learn within a minute on 2 CPU cores.
DEMO_TRAINING = {"training_type": "lora", "learning_rate": 3e-3, "lora_r": 16, "lora_alpha": 32, "batch_size": 4,
                 "gradient_accumulation_steps": 1, "max_seq_length": 128, "warmup_steps": 5}


@dataclass(frozen=True)
class ModelAssets:
    """A demo's built folder: the model under `model/`."""
    root: Path

    @property
    def model_dir(self) -> Path:
        return self.root / "model"


@dataclass(frozen=True)
class ModelDataAssets(ModelAssets):
    """A demo's built folder with its own data under `data/`."""

    @property
    def data_dir(self) -> Path:
        return self.root / "data"


@dataclass(frozen=True)
class DemoAssets(ModelDataAssets):

    @property
    def alpaca(self) -> Path:
        return self.data_dir / "alpaca.jsonl"

    @property
    def sharegpt(self) -> Path:
        return self.data_dir / "sharegpt.json"

    @property
    def chatml(self) -> Path:
        return self.data_dir / "chatml.jsonl"

    @property
    def text(self) -> Path:
        return self.data_dir / "text.jsonl"

    @property
    def alpaca_csv(self) -> Path:
        return self.data_dir / "alpaca.csv"

    @property
    def alpaca_parquet(self) -> Path:
        return self.data_dir / "alpaca.parquet"


COLOURS = ["red", "blue", "green", "yellow", "purple", "orange", "black", "white"]
CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Spain": "Madrid", "Egypt": "Cairo",
            "Canada": "Ottawa", "Kenya": "Nairobi", "Peru": "Lima", "Norway": "Oslo", "Chile": "Santiago"}
WORDS = ["apple", "river", "stone", "cloud", "light", "music", "tiger", "bread", "chair", "ocean"]


def sample_pairs(n: int = 320, seed: int = 7) -> list[dict[str, str]]:
    """Synthetic instruction/response pairs in alpaca form (instruction, input, output)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            a, b = rng.randint(1, 20), rng.randint(1, 20)
            rows.append({"instruction": "Add the two numbers.", "input": f"{a} and {b}", "output": f"The sum is {a + b}."})
        elif kind == 1:
            country = rng.choice(list(CAPITALS))
            rows.append({"instruction": f"What is the capital of {country}?", "input": "", "output": f"The capital of {country} is {CAPITALS[country]}."})
        elif kind == 2:
            word = rng.choice(WORDS)
            rows.append({"instruction": "Spell the word backwards.", "input": word, "output": f"Backwards it is {word[::-1]}."})
        else:
            colour = rng.choice(COLOURS)
            rows.append({"instruction": "Name the colour you were given.", "input": f"The colour is {colour}.", "output": f"You gave me {colour}."})
    return rows


def _user_text(row: dict[str, str]) -> str:
    return row["instruction"] + (f"\n{row['input']}" if row["input"] else "")


def _write_datasets(data_dir: Path) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    pairs = sample_pairs()
    with open(data_dir / "alpaca.jsonl", "w") as f:
        for row in pairs:
            f.write(json.dumps(row) + "\n")
    sharegpt = []
    for i, row in enumerate(pairs[:80]):
        turns = [{"from": "human", "value": _user_text(row)}, {"from": "gpt", "value": row["output"]}]
        if i % 5 == 0:
            # Function-calling style turns, as in many public sharegpt datasets.
            turns = [{"from": "system", "value": "You can call tools."},
                     {"from": "human", "value": _user_text(row)},
                     {"from": "function_call", "value": json.dumps({"name": "lookup", "arguments": {"q": row["instruction"]}})},
                     {"from": "observation", "value": row["output"]},
                     {"from": "gpt", "value": row["output"]}]
        sharegpt.append({"conversations": turns})
    (data_dir / "sharegpt.json").write_text(json.dumps(sharegpt, indent=1))
    with open(data_dir / "chatml.jsonl", "w") as f:
        for row in pairs[:80]:
            msgs = [{"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": _user_text(row)},
                    {"role": "assistant", "content": row["output"]}]
            f.write(json.dumps({"messages": msgs}) + "\n")
    with open(data_dir / "text.jsonl", "w") as f:
        for row in pairs[:120]:
            f.write(json.dumps({"text": f"{_user_text(row)} {row['output']}"}) + "\n")
    import pandas as pd  # comes with `datasets`; only the builder needs it

    frame = pd.DataFrame(pairs[:60])
    frame.to_csv(data_dir / "alpaca.csv", index=False)
    frame.to_parquet(data_dir / "alpaca.parquet", index=False)


def _corpus(pairs: list[dict[str, str]]) -> list[str]:
    lines = []
    for row in pairs:
        lines.append(_user_text(row))
        lines.append(row["output"])
    lines.append("You are a helpful assistant. You can call tools. lookup arguments name")
    return lines


def train_demo_tokenizer(corpus: list[str], extra_special_tokens: tuple[str, ...] = (), vocab_size: int = 700) -> Any:
    """The demo's byte-level BPE tokenizer, trained on `corpus`, with the chat markers as
    special tokens (plus `extra_special_tokens`, e.g. an image placeholder, after them)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = SPECIAL_TOKENS + list(extra_special_tokens)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="<|end|>", pad_token="<pad>",
                                   unk_token="<unk>", additional_special_tokens=specials[4:])
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 2048
    return fast


def _build_model(model_dir: Path, data_dir: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a one-off local save needs no progress bar

    fast = train_demo_tokenizer(_corpus(sample_pairs()))
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    model.save_pretrained(model_dir)
    fast.save_pretrained(model_dir)


def _build(folder: Path) -> None:
    _write_datasets(folder / "data")
    _build_model(folder / "model", folder / "data")


def build_demo_assets(target: Path) -> DemoAssets:
    """Build the model and data into `target` atomically (temp folder, then rename)."""
    return DemoAssets(build_atomically(target, DEMO_VERSION, _build))


def build_atomically(target: Path, version: str, build: Callable[[Path], None]) -> Path:
    """Run `build(folder)` in a temporary folder beside `target`, mark it READY and rename it
    into place, so a reader never sees a half-built folder; a concurrent builder that got
    there first wins."""
    target = Path(target)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        build(tmp)
        (tmp / "READY").write_text(version)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "READY").exists():  # lost a race to a concurrent builder that failed
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def ensure_built(root: Path | None, version: str, build: Callable[[Path], None]) -> Path:
    """A demo's asset folder, built on first use (`build_atomically`); cached under the
    home as `version` unless `root` is given."""
    target = Path(root) if root else paths.cache_dir() / version
    if (target / "READY").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    return build_atomically(target, version, build)


def chat_demo_config(assets: ModelDataAssets, data: Path, *, steps: int, display_name: str, **overrides: Any) -> Any:
    """The media chat demos' run (vision, audio chat): a LoRA run with the demo recipe and
    the loss on the replies only, so what falls is what the model learns from the media."""
    from tunelab.config.run_config import parse_config

    return parse_config({
        "model_name": str(assets.model_dir),
        "local_datasets": [str(data)],
        **DEMO_TRAINING,
        "backend": "torch",
        "max_steps": steps,
        "train_on_completions": True,
        "display_name": display_name,
        **overrides,
    })


def ensure_demo_assets(root: Path | None = None) -> DemoAssets:
    """The demo assets, built on first use (cached under the home unless `root` is given)."""
    return DemoAssets(ensure_built(root, DEMO_VERSION, _build))
