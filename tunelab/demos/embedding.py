"""The embedding demo: a tiny random-init BERT-style encoder saved as a sentence-transformers
folder, a WordPiece tokenizer trained on the spot, and generated query/passage pairs whose
relation can be learnt — all built offline in a few seconds.

Each pair describes one thing by three attributes (colour, size, place). The query names
them in one vocabulary ("crimson", "tiny", "ocean"), the passage in another ("red",
"small", "sea"), so the two share no informative word: a random encoder retrieves at
chance, and retrieval on held-out pairs (of attribute combinations never trained on)
rises only as the model learns which words mean the same. Every combination appears
once, so each held-out query has exactly one right passage.
The data also comes as triplets, scored pairs and labelled pairs (the other shapes).
Built once and cached under `<home>/cache/embedding-demo-v1` (or any folder given).
Heavy imports (torch, transformers, sentence-transformers) happen only inside the build.
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunelab.demos.assets import build_atomically, ensure_built

EMBEDDING_DEMO_VERSION = "embedding-demo-v1"
# attribute -> (query words, passage words): the i-th query word means the i-th passage word.
ATTRIBUTES = {
    "colour": (("crimson", "azure", "emerald", "golden", "violet", "ivory"), ("red", "blue", "green", "yellow", "purple", "white")),
    "size": (("tiny", "huge", "slender", "stout", "towering", "medium"), ("small", "big", "thin", "wide", "tall", "average")),
    "place": (("ocean", "desert", "forest", "mountain", "city", "river"), ("sea", "sand", "trees", "peak", "streets", "stream")),
}
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# What the demo trains with: full fine-tuning (a random encoder has nothing to keep), a
# batch whose other rows are the in-batch negatives, and an eval every 20 steps.
EMBEDDING_DEMO_TRAINING = {"training_type": "full", "learning_rate": 1e-3, "batch_size": 16, "gradient_accumulation_steps": 1,
                           "max_seq_length": 32, "warmup_steps": 5, "weight_decay": 0.0, "eval_holdout": 0.15, "eval_steps": 10}
# The metric the demo summary shows rising: retrieval quality on the held-out pairs.
DEMO_METRIC = "eval_cosine_ndcg@10"


@dataclass(frozen=True)
class EmbeddingDemoAssets:
    root: Path

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def encoder_dir(self) -> Path:
        """The same encoder as a plain transformers folder (no sentence-transformers files)."""
        return self.root / "encoder"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def pairs(self) -> Path:
        """(anchor, positive) rows."""
        return self.data_dir / "pairs.jsonl"

    @property
    def triplets(self) -> Path:
        """(anchor, positive, negative) rows."""
        return self.data_dir / "triplets.jsonl"

    @property
    def scored(self) -> Path:
        """(sentence1, sentence2, score) rows: the share of attributes the two texts agree on."""
        return self.data_dir / "scored.jsonl"

    @property
    def labelled(self) -> Path:
        """(query, document, label) rows: 1 for a matching passage, 0 for another."""
        return self.data_dir / "labelled.jsonl"

    @property
    def pairs_csv(self) -> Path:
        """Pairs under their own column names (question, answer): needs column_mapping."""
        return self.data_dir / "qa.csv"


def query_text(combo: tuple[int, ...]) -> str:
    colour, size, place = (ATTRIBUTES[name][0][i] for name, i in zip(ATTRIBUTES, combo))
    return f"which {size} {colour} thing is found near the {place}?"


def passage_text(combo: tuple[int, ...]) -> str:
    colour, size, place = (ATTRIBUTES[name][1][i] for name, i in zip(ATTRIBUTES, combo))
    return f"it is {size} and {colour}, and it lives by the {place}."


def _combos() -> list[tuple[int, ...]]:
    combos = list(itertools.product(*(range(len(words[0])) for words in ATTRIBUTES.values())))
    random.Random(5).shuffle(combos)
    return combos


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def _write_datasets(data_dir: Path) -> list[str]:
    """The data files; returns the corpus the tokenizer learns from."""
    data_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(9)
    combos = _combos()
    _write(data_dir / "pairs.jsonl", [{"anchor": query_text(c), "positive": passage_text(c)} for c in combos])
    others = [combos[(i + 1 + rng.randrange(len(combos) - 1)) % len(combos)] for i in range(len(combos))]
    _write(data_dir / "triplets.jsonl", [{"anchor": query_text(c), "positive": passage_text(c), "negative": passage_text(o)}
                                         for c, o in zip(combos, others)])
    _write(data_dir / "scored.jsonl", [{"sentence1": query_text(c), "sentence2": passage_text(o),
                                        "score": sum(a == b for a, b in zip(c, o)) / len(c)}
                                       for c in combos for o in (c, rng.choice(combos))])
    _write(data_dir / "labelled.jsonl", [{"query": query_text(c), "document": passage_text(o), "label": int(c == o)}
                                         for c in combos for o in (c, rng.choice(combos))])
    with open(data_dir / "qa.csv", "w") as f:
        f.write("question,answer\n")
        for c in combos[:60]:
            f.write(f"\"{query_text(c)}\",\"{passage_text(c)}\"\n")
    return [query_text(c) for c in combos] + [passage_text(c) for c in combos]


def train_wordpiece_tokenizer(corpus: list[str], vocab_size: int = 200) -> Any:
    """A BERT-style (lower-casing, WordPiece) tokenizer trained on `corpus`."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(corpus, trainer=trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=64)


def _build_model(root: Path, corpus: list[str]) -> None:
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import BertConfig, BertModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = train_wordpiece_tokenizer(corpus)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    encoder = root / "encoder"
    BertModel(config).save_pretrained(encoder)
    tokenizer.save_pretrained(encoder)
    # sentence-transformers wraps a plain encoder with mean pooling; saved, that is its own folder.
    SentenceTransformer(str(encoder), device="cpu").save_pretrained(str(root / "model"))


def _build(folder: Path) -> None:
    _build_model(folder, _write_datasets(folder / "data"))


def build_embedding_demo_assets(target: Path) -> EmbeddingDemoAssets:
    """Build the model and data into `target` atomically (temp folder, then rename)."""
    return EmbeddingDemoAssets(build_atomically(target, EMBEDDING_DEMO_VERSION, _build))


def ensure_embedding_demo_assets(root: Path | None = None) -> EmbeddingDemoAssets:
    """The embedding demo assets, built on first use (cached under the home unless `root` is given)."""
    return EmbeddingDemoAssets(ensure_built(root, EMBEDDING_DEMO_VERSION, _build))


def eval_history(output_dir: str | Path | None, metric: str = DEMO_METRIC) -> list[tuple[int, float]]:
    """(step, value) of an evaluator metric at each eval of a finished run, as the Trainer
    logged it into the last checkpoint's `trainer_state.json` (a plain JSON file, no torch)."""
    from tunelab.checkpoints import latest_valid_checkpoint

    checkpoint = latest_valid_checkpoint(output_dir)
    if checkpoint is None:
        return []
    try:
        history = json.loads((checkpoint / "trainer_state.json").read_text()).get("log_history") or []
    except (OSError, ValueError):
        return []
    return [(int(entry["step"]), float(entry[metric])) for entry in history if isinstance(entry, dict) and metric in entry]


def embedding_demo_config(assets: EmbeddingDemoAssets, *, steps: int = 80, data: Path | None = None, **overrides):
    """A full fine-tune of the tiny encoder on the query/passage pairs, evaluated on held-out pairs."""
    from tunelab.config.run_config import parse_config

    return parse_config({
        "model_name": str(assets.model_dir),
        "local_datasets": [str(data or assets.pairs)],
        **EMBEDDING_DEMO_TRAINING,
        "backend": "torch",
        "max_steps": steps,
        "display_name": "demo (embedding)",
        **overrides,
    })


def demo_run_config(steps: int, backend: str, method: str):
    """`tunelab demo --modality embedding` (the embedding spec's `demo_builder`)."""
    return embedding_demo_config(ensure_embedding_demo_assets(), steps=steps)


def print_demo_evals(outcome, console) -> None:
    """nDCG@10 on the held-out pairs, first eval against last."""
    evals = eval_history(outcome.run.get("output_dir"))
    if evals:
        console.print(f"nDCG@10:    {evals[0][1]:.3f} (step {evals[0][0]}) -> {evals[-1][1]:.3f} (step {evals[-1][0]}) on held-out pairs")
